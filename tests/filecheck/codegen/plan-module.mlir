// RUN: sparselift-opt %s -p lift-sparse -t plan-module | filecheck %s --check-prefixes=CHECK,SYNC
// RUN: sparselift-opt %s -p lift-sparse,hide-latency -t plan-module | filecheck %s --check-prefixes=CHECK,HIDE
// RUN: not sparselift-opt %s -t plan-module 2>&1 | filecheck %s --check-prefix=OPAQUE

// A table-wise group on two ranks: the plan module routes, exchanges lengths and indices,
// looks up on the owner, packs per owner rank and unpacks the pooled vectors; backward
// sends the gradients back and updates the tables on their owners. The emitter follows the
// IR's schedule: without hide-latency every exchange is synchronous and the step cannot be
// pipelined; after it, the segment straddles the bottom MLP in stages.

// CHECK-LABEL: SparseLift plan module
// CHECK:       plan hash: {{[0-9a-f]+}}
// CHECK:       step: @step, world size 2, 2 tables, 1 sparse segment(s)
// CHECK:       collectives per step: 3 forward, 1 backward
// SYNC:        DENSE_GRAD_OVERLAP = False
// HIDE:        DENSE_GRAD_OVERLAP = True
// CHECK:       class Plan(rt.PlanBase):
// CHECK:       def forward(self, *inputs):
// CHECK:         self.dense("sparse_inputs"
// One check of the batch and one agreement on every rank's batch size per step, before the first
// segment: it covers every route, so the routes themselves need no collective.
// CHECK-NEXT:    self.check_batch([(ROUTE_[[R:[0-9]+]], [v{{[0-9]+}}, v{{[0-9]+}}], [v{{[0-9]+}}, v{{[0-9]+}}], [], torch.int64)])
// SYNC-NEXT:     = self.segment(0, [
// SYNC-NEXT:     self.dense("dense_pre"
// HIDE-NEXT:     self.prefetch(0, [
// HIDE-NEXT:     self.dense("dense_pre"
// HIDE-NEXT:     = self.segment(0, [
// CHECK-NEXT:    self.dense("dense_post"
// CHECK:       def start(self, *inputs):
// With nothing to start ahead, `start` only checks the next batch: its agreement rides in this
// step's dense-gradient all-reduce (no collective of its own).
// SYNC:          self.dense("sparse_inputs"
// SYNC-NEXT:     self.check_batch([(ROUTE_[[R]], {{.*}})], ahead=True, ride=True)
// `start` checks the next batch and agrees on its sizes; that batch's forward reuses them.
// HIDE:          self.dense("sparse_inputs"
// HIDE-NEXT:     self.check_batch([(ROUTE_[[R]], {{.*}})], ahead=True)
// HIDE-NEXT:     self.prefetch(0, [{{.*}}], ahead=True)
// CHECK:       def _segment_0_forward(self
// Every rank's batch size this step (batches may differ across ranks and steps), agreed by
// `check_batch` together with whether every rank's batch is valid: the exchanges and buffers
// below are sized by it, per peer.
// CHECK:         , batches = rt.route(self, ROUTE_[[R]], {{.*}}, checked=0)
// Lengths first, then the indices with receive sizes taken from the received lengths (no
// separate sizes exchange). Asynchronous after hide-latency: the bottom MLP runs meanwhile.
// When every rank's bags all hold one id (the batch check agreed on it), the lengths are all 1
// and nothing is exchanged.
// SYNC-NEXT:     [[LV:v[0-9]+]], = rt.all_to_all(self, [{{v[0-9]+}}], splits=SPLITS_{{[0-9]+}}, role='input_lengths', batches=batches.ranks, lengths_known=batches.one_id)
// SYNC-NEXT:     [[RS:rs_v[0-9]+]] = rt.recv_splits(self, [[LV]], batches.ranks)
// SYNC-NEXT:     {{v[0-9]+}}, {{v[0-9]+}} = rt.all_to_all_dynamic(self, [{{v[0-9]+}}], {{v[0-9]+}}, [[RS]], role='input_indices')
// HIDE-NEXT:     [[L:v[0-9]+]] = rt.all_to_all(self, [{{v[0-9]+}}], splits=SPLITS_{{[0-9]+}}, role='input_lengths', batches=batches.ranks, lengths_known=batches.one_id, async_op=True)
// HIDE-NEXT:     yield "lengths"
// HIDE-NEXT:     [[LV:v[0-9]+]] = rt.wait([[L]])[0]
// HIDE-NEXT:     [[RS:rs_v[0-9]+]] = rt.recv_splits(self, [[LV]], batches.ranks)
// HIDE-NEXT:     [[I:v[0-9]+]] = rt.all_to_all_dynamic(self, [{{v[0-9]+}}], {{v[0-9]+}}, [[RS]], role='input_indices', async_op=True)
// HIDE-NEXT:     yield "indices"
// HIDE-NEXT:     yield "stage"
// HIDE-NEXT:     {{v[0-9]+}}, {{v[0-9]+}} = rt.wait([[I]])
// CHECK:         if self.rank in (0,):
// CHECK-NEXT:      {{v[0-9]+}} = rt.lookup(self, 't0'
// CHECK-SAME:      segment_batches=batches.ranks)
// The owner's pack has one segment per destination, of that rank's batch; the unpack of the
// pooled vectors received has this rank's batch in every segment.
// CHECK:           = rt.pack(self, [{{v[0-9]+}}], LAYOUT_{{[0-9]+}}, torch.float32, batch=batches.ranks)
// CHECK:         rt.all_to_all(self, [{{v[0-9]+}}, {{v[0-9]+}}], splits=SPLITS_{{[0-9]+}}, role='output_pooled', batches=batches.ranks)
// CHECK:         rt.unpack(self, {{.*}}, batch=batches.own)
// CHECK:         return [{{.*}}], [{{v[0-9]+}}, {{v[0-9]+}}, batches.saved()]
// CHECK:       def _segment_0_backward(self, grads, saved):
// CHECK:         {{v[0-9]+}}, {{v[0-9]+}}, saved_batches = saved
// CHECK-NEXT:    batches = rt.saved_batch_sizes(saved_batches)
// CHECK-NEXT:    = rt.pack(self, {{.*}}, batch=batches.own)
// Synchronous, or overlapping the bottom MLP's backward; the updates run when backward ends.
// SYNC:          = rt.all_to_all(self, {{.*}} role='grad_pooled', batches=batches.ranks)
// SYNC-NOT:      yield
// HIDE:          [[G:v[0-9]+]] = rt.all_to_all(self, {{.*}} role='grad_pooled', batches=batches.ranks, async_op=True)
// HIDE-NEXT:     yield "stage"
// HIDE-NEXT:     {{v[0-9]+}}, = rt.wait([[G]])
// CHECK:           = rt.unpack(self, {{.*}}, batch=batches.ranks)
// CHECK:         rt.lookup_update(self, 't0'
// CHECK-SAME:      segment_batches=batches.ranks, grad={{v[0-9]+}}, optimizer='sgd', group=0
// CHECK:         rt.lookup_update(self, 't1'
// SYNC:          return None

// OPAQUE: plan-module needs lifted IR: run -p lift-sparse first

sched.step @step world_size = 2 outputs = 1 {
^bb0(%x: tensor<?x4xf32>, %i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %a, %b, %c, %d = sched.dense @sparse_inputs(%i0, %o0, %i1, %o1) phase "forward" : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%a, %c : tensor<?xi64>, tensor<?xi64>) offsets(%b, %d : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, mean>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 2.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %h = sched.dense @dense_pre(%x) phase "forward" : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %out = sched.dense @dense_post(%h, %p0, %p1) phase "forward" : (tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x1xf32>
  sched.yield %out : tensor<?x1xf32>
} backward {
^bb0(%g: tensor<?x1xf32>):
  %gh, %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?x1xf32>) -> (tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x4xf32>)
  %gx = sched.dense @dense_pre(%gh) phase "backward" : (tensor<?x4xf32>) -> tensor<?x4xf32>
  sched.yield
}
