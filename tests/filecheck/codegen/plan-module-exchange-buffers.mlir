// RUN: sparselift-opt %s -p lift-sparse,generate-kernels -t plan-module | filecheck %s --check-prefixes=CHECK,FUSED
// RUN: sparselift-opt %s -p lift-sparse,generate-kernels,hide-latency -t plan-module | filecheck %s --check-prefixes=CHECK,FUSED
// RUN: sparselift-opt %s -p 'lift-sparse,generate-kernels{min-tables=3}' -t plan-module | filecheck %s --check-prefixes=CHECK,PERTABLE

// Exchange buffers the fused kernels use in place. A fused lookup whose results only the
// output pack reads returns the packed buffer itself (`packed=`: each table's kernel writes its
// columns of the buffer), and the pack disappears; a fused update whose gradients are exactly
// the members of an unpack reads the received buffer (`packed_grads=`), and the unpack
// disappears. The dense side keeps its unpack and pack: their members are dense-region values.
// Per-table lookups and updates (no fused kernel) keep every pack and unpack.

// CHECK-LABEL: def _segment_0_forward(self
// FUSED:         [[B0:v[0-9]+]] = rt.fused_lookup(self, ('t0', 't1'), {{.*}}, packed=([[L0:LAYOUT_[0-9]+]], torch.float32, batches.ranks))
// FUSED:         [[B1:v[0-9]+]] = rt.fused_lookup(self, ('t2', 't3'), {{.*}}, packed=([[L0]], torch.float32, batches.ranks))
// FUSED-NOT:     rt.pack(
// FUSED:         rt.all_to_all(self, [[[B0]], [[B1]]], splits=SPLITS_{{[0-9]+}}, role='output_pooled', batches=batches.ranks)
// PERTABLE:      rt.lookup(self, 't0'
// PERTABLE:      rt.lookup(self, 't3'
// PERTABLE:      [[P0:v[0-9]+]] = rt.pack(self, [{{v[0-9]+}}, {{v[0-9]+}}], LAYOUT_{{[0-9]+}}, torch.float32, batch=batches.ranks)
// PERTABLE:      [[P1:v[0-9]+]] = rt.pack(self, [{{v[0-9]+}}, {{v[0-9]+}}], LAYOUT_{{[0-9]+}}, torch.float32, batch=batches.ranks)
// PERTABLE:      rt.all_to_all(self, [[[P0]], [[P1]]], splits=SPLITS_{{[0-9]+}}, role='output_pooled', batches=batches.ranks)
// CHECK:         = rt.unpack(self, {{v[0-9]+}}, LAYOUT_{{[0-9]+}}, (8, 8, 8, 8), batch=batches.own)

// CHECK-LABEL: def _segment_0_backward(self, grads, saved):
// CHECK:         = rt.pack(self, [{{v[0-9]+, v[0-9]+, v[0-9]+, v[0-9]+}}], LAYOUT_{{[0-9]+}}, torch.float32, batch=batches.own)
// CHECK:         [[G:v[0-9]+]], = rt.{{all_to_all|wait}}(
// FUSED-NOT:     rt.unpack(
// FUSED:         rt.fused_lookup_update(self, ('t0', 't1'), {{.*}}, packed_grads=([[G]], [[L1:LAYOUT_[0-9]+]], (8, 8), batches.ranks), optimizer='sgd'
// FUSED:         rt.fused_lookup_update(self, ('t2', 't3'), {{.*}}, packed_grads=([[G]], [[L1]], (8, 8), batches.ranks), optimizer='sgd'
// PERTABLE:      rt.unpack(self, [[G]], LAYOUT_{{[0-9]+}}, (8, 8), batch=batches.ranks)
// PERTABLE:      rt.unpack(self, [[G]], LAYOUT_{{[0-9]+}}, (8, 8), batch=batches.ranks)
// PERTABLE:      rt.lookup_update(self, 't0'
// PERTABLE:      rt.lookup_update(self, 't3'

sched.step @step world_size = 2 outputs = 1 {
^bb0(%x: tensor<?x4xf32>, %i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>, %i2: tensor<?xi64>, %o2: tensor<?xi64>, %i3: tensor<?xi64>, %o3: tensor<?xi64>):
  %p0, %p1, %p2, %p3 = sparse.embedding_bag_collection "emb" ids(%i0, %i1, %i2, %i3 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1, %o2, %o3 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 8, f32, sum>, #sparse.table<"t2", rows = 70, dim = 8, f32, sum>, #sparse.table<"t3", rows = 30, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 2.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>, #sparse.feature<"f2" -> "t2", pooling_factor = 1.0>, #sparse.feature<"f3" -> "t3", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>, #sparse.placement<"t2", table_wise, rank = 1>, #sparse.placement<"t3", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
  %out = sched.dense @dense_post(%x, %p0, %p1, %p2, %p3) phase "forward" : (tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x1xf32>
  sched.yield %out : tensor<?x1xf32>
} backward {
^bb0(%g: tensor<?x1xf32>):
  %gx, %g0, %g1, %g2, %g3 = sched.dense @dense_post(%g) phase "backward" : (tensor<?x1xf32>) -> (tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>)
  sched.yield
}
