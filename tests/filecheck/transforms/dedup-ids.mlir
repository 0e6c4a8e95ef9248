// RUN: sparselift-opt %s -p 'lift-sparse{rows=jagged},dedup-ids' | filecheck %s
// RUN: sparselift-opt %s -p 'lift-sparse{rows=jagged},hide-latency,dedup-ids' | filecheck %s --check-prefix=LATE
// RUN: sparselift-opt %s -p lift-sparse,dedup-ids | filecheck %s --check-prefix=PADDED
// RUN: sparselift-opt %s -p 'lift-sparse{rows=jagged},print-srsv' | filecheck %s --check-prefix=SRSV
// RUN: sparselift-opt %s -p 'lift-sparse{rows=jagged},dedup-ids,print-srsv' | filecheck %s --check-prefix=SRSV-DEDUP

// The SRSV sizes what dedup-ids sends by the table's share of distinct ids (`distinct = 0.5`,
// measured at export): the ids, the rows and the gradient rows exchanges carry half as much
// (100 samples, 1.75 ids each: 1,400 B of ids, 5,600 B of rows of 8 x f32).
// SRSV:        input_indices  item/table_wise  0,1 {{ +}}i64 {{ +}}estimated {{ +}}1400
// SRSV:        output_rows {{ +}}item/table_wise  0,1 {{ +}}f32 {{ +}}estimated {{ +}}5600
// SRSV:        grad_rows {{ +}}item/table_wise  0,1 {{ +}}f32 {{ +}}estimated {{ +}}5600
// SRSV-DEDUP:  input_indices  item/table_wise  0,1 {{ +}}i64 {{ +}}estimated {{ +}}700
// SRSV-DEDUP:  output_rows {{ +}}item/table_wise  0,1 {{ +}}f32 {{ +}}estimated {{ +}}2800
// SRSV-DEDUP:  grad_rows {{ +}}item/table_wise  0,1 {{ +}}f32 {{ +}}estimated {{ +}}2800

// dedup-ids on the jagged rows path of an unpooled table (`item`, two id positions, on rank 0
// of 2): each destination's distinct ids go through the ids exchange, the owner gathers and
// returns one row per distinct id (the exchange sized by the distinct counts both ways),
// take_rows spreads them back to one per routed id before the expand. Backward sums the
// routed ids' gradients into one per distinct id and sends them the way the rows came.
// CHECK-LABEL: sched.step @table_wise world_size = 2 outputs = 1
// CHECK:       %[[L:[0-9]+]], %[[I:[0-9]+]], %[[S:[0-9]+]] = sparse.route
// CHECK:       %[[U:[0-9]+]], %[[N:[0-9]+]], %[[INV:[0-9]+]] = sparse.unique_ids %[[I]], %[[S]] {group = "item/table_wise"} : tensor<?xi64>, tensor<2xi64> -> tensor<?xi64>, tensor<2xi64>, tensor<?xi64>
// CHECK-NEXT:  %[[RI:[0-9]+]], %[[RN:[0-9]+]] = coll.all_to_all %[[U]] {{.*}} role #coll.role<input_indices> send_splits(%[[N]] : tensor<2xi64>)
// CHECK-NEXT:  %[[ROWS:[0-9]+]], %{{[0-9]+}} = sparse.gather_rows %{{[0-9]+}}, %[[RI]]
// CHECK-NEXT:  %[[SEND:[0-9]+]] = sparse.row_splits %[[RN]] dim = 8
// CHECK-NEXT:  %[[RECV:[0-9]+]] = sparse.row_splits %[[N]] dim = 8
// CHECK-NEXT:  %[[OUT:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[ROWS]] {{.*}} role #coll.role<output_rows> send_splits(%[[SEND]] : tensor<2xi64>) recv_splits(%[[RECV]] : tensor<2xi64>)
// CHECK-NEXT:  %[[ALL:[0-9]+]] = sparse.take_rows %[[OUT]], %[[INV]] dim = 8 {group = "item/table_wise"} : tensor<?xf32>, tensor<?xi64> -> tensor<?xf32>
// CHECK-NEXT:  sparse.expand_rows %[[ALL]], %[[L]]
// CHECK-NOT:   sparse.row_splits %[[S]]
// CHECK:       } backward {
// CHECK:       %[[C:[0-9]+]] = sparse.compact_rows
// CHECK-NEXT:  %[[SUM:[0-9]+]] = sparse.sum_rows %[[C]], %{{[0-9]+}}, %{{[0-9]+}} dim = 8 {group = "item/table_wise"} : tensor<?xf32>, tensor<?xi64>, tensor<2xi64> -> tensor<?xf32>
// CHECK-NEXT:  %[[GR:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[SUM]] {{.*}} role #coll.role<grad_rows>
// CHECK-NEXT:  sparse.rows_update %{{[0-9]+}} grad %[[GR]] table = #sparse.table<"item"

// After hide-latency the ids exchange is a start/wait pair: dedup-ids leaves the group, with the remark.
// LATE:        coll.all_to_all {{.*}} role #coll.role<output_rows> {{.*}} remark = #sched.remark<"dedup-ids", "shape", "not deduplicated: the rows do not travel as compact-rows sends them">
// LATE-NOT:    sparse.unique_ids

// Padded rows (no compact-rows): nothing to deduplicate, nothing said.
// PADDED-NOT:  sparse.unique_ids
// PADDED-NOT:  dedup-ids
sched.step @table_wise world_size = 2 outputs = 1 attributes {batch = "100"} {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %h0, %h1 = sparse.embedding_bag_collection "item" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"item", rows = 100, dim = 8, f32, none, distinct = 0.5>] features = [#sparse.feature<"hist[0]" -> "item", pooling_factor = 1.0>, #sparse.feature<"hist[1]" -> "item", pooling_factor = 0.75>] placements = [#sparse.placement<"item", table_wise, rank = 0>] {group = "item/table_wise"} -> tensor<?x8xf32>, tensor<?x8xf32>
  %out = sched.dense @dense_post(%h0, %h1) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb1(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  sched.yield
}
