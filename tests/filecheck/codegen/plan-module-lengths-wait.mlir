// RUN: sparselift-opt %s -t plan-module | filecheck %s

// A lengths exchange waited on right after its start in the IR (hide-latency puts the wait
// there when nothing is ready to run between them, as in DIN's item group). The emitter waits
// on it after the "lengths" marker, right before the indices exchange it sizes: a prefetch for
// the next batch (`start`, `ahead=True`) stops at the marker with the lengths still in flight
// behind this step's backward. Waited at the IR's place, that prefetch would block on the peers.

// CHECK:       def _segment_0_forward(self
// CHECK:         [[L:v[0-9]+]] = rt.all_to_all(self, [{{v[0-9]+}}], splits=SPLITS_{{[0-9]+}}, role='input_lengths', {{.*}}async_op=True)
// CHECK-NEXT:    yield "lengths"
// CHECK-NEXT:    [[LV:v[0-9]+]] = rt.wait([[L]])[0]
// CHECK-NEXT:    [[RS:rs_v[0-9]+]] = rt.recv_splits(self, [[LV]], batches.ranks)
// CHECK-NEXT:    {{v[0-9]+}} = rt.all_to_all_dynamic(self, [{{v[0-9]+}}], {{v[0-9]+}}, [[RS]], role='input_indices', async_op=True)
// CHECK-NEXT:    yield "indices"
// The lengths are waited on once.
// CHECK-NOT:     rt.wait([[L]])
// CHECK:         rt.gather_rows(self, 'item', [[LV]],
// CHECK:       def _segment_0_backward(

builtin.module {
  sched.step @table_wise world_size = 2 outputs = 1 {
  ^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
    %0, %1, %2 = sparse.route ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"hist[0]" -> "item", pooling_factor = 1.0>, #sparse.feature<"hist[1]" -> "item", pooling_factor = 0.75>] placements = [#sparse.placement<"item", table_wise, rank = 0>] world_size = 2 {group = "item/table_wise"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
    %3 = coll.all_to_all_start %0 on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[2, 0], [2, 0]]> {group = "item/table_wise"} : tensor<?xi32> -> !coll.handle<tensor<?xi32>>
    %6 = coll.wait %3 : !coll.handle<tensor<?xi32>> -> tensor<?xi32>
    %4 = coll.all_to_all_start %1 on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%2 : tensor<2xi64>) {group = "item/table_wise"} : tensor<?xi64> -> !coll.handle<tensor<?xi64>, tensor<2xi64>>
    %5 = sparse.row_splits %2 dim = 8 {group = "item/table_wise"} : tensor<2xi64> -> tensor<2xi64>
    %7, %8 = coll.wait %4 : !coll.handle<tensor<?xi64>, tensor<2xi64>> -> tensor<?xi64>, tensor<2xi64>
    %9, %10 = sparse.gather_rows %6, %7 table = #sparse.table<"item", rows = 100, dim = 8, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] {group = "item/table_wise"} : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
    %11, %12 = coll.all_to_all %9 on #coll.group<[0, 1]> role #coll.role<output_rows> send_splits(%10 : tensor<2xi64>) recv_splits(%5 : tensor<2xi64>) {group = "item/table_wise", remark = #sched.remark<"hide-latency", "no-overlap", "nothing independent to overlap: the first use follows the exchange">} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
    %13, %14 = sparse.expand_rows %11, %0 layout = #sparse.layout<[[0 : 8, 8 : 8], [0 : 0, 0 : 0]]> dim = 8 {group = "item/table_wise"} : tensor<?xf32>, tensor<?xi32> -> tensor<?x8xf32>, tensor<?x8xf32>
    %h0, %h1 = sparse.permute %13, %14 order = [0, 1] {group = "item/table_wise"} : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>, tensor<?x8xf32>
    %out = sched.dense @dense_post(%h0, %h1) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?xf32>
    sched.yield %out, %7, %0, %10, %5 : tensor<?xf32>, tensor<?xi64>, tensor<?xi32>, tensor<2xi64>, tensor<2xi64>
  } backward {
  ^bb0(%g: tensor<?xf32>, %15: tensor<?xi64>, %16: tensor<?xi32>, %17: tensor<2xi64>, %18: tensor<2xi64>):
    %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
    %19 = sparse.compact_rows %16, %g0, %g1 layout = #sparse.layout<[[0 : 8, 8 : 8], [0 : 0, 0 : 0]]> dim = 8 {group = "item/table_wise"} : tensor<?xi32>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?xf32>
    %20, %21 = coll.all_to_all %19 on #coll.group<[0, 1]> role #coll.role<grad_rows> send_splits(%18 : tensor<2xi64>) recv_splits(%17 : tensor<2xi64>) {group = "item/table_wise"} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
    sparse.rows_update %15 grad %20 table = #sparse.table<"item", rows = 100, dim = 8, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] optimizer = #sparse.optimizer<sgd> {group = "item/table_wise"} : tensor<?xi64>, tensor<?xf32>
    sched.yield
  }
}
