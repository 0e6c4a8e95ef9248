// RUN: sparselift-opt %s --split-input-file -p lift-sparse,compact-rows | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,compact-rows{min-empty-share=0.5}' | filecheck %s --check-prefix=SHARE
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse{rows=jagged}' | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p lift-sparse,generate-kernels,compact-rows | filecheck %s --check-prefix=FUSED
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,compact-rows{min-empty-share=0.7}' | filecheck %s --check-prefix=RW-SHARE

// compact-rows on hand-written steps: an unpooled table (`item`, two id positions, one of them
// empty for a quarter of the samples: 12.5% of the bags empty) read table-wise from rank 0 on 2
// ranks. The owner gathers one row per received id, the output exchange is sized at run time
// (the route's split sizes: no size exchange), the samples' side expands the rows in place of
// the padded unpack. Backward compacts the gradients, sends them back the same way and updates
// per id. `lift-sparse{rows=jagged}` (the compiler's lowering) does the same.
// CHECK-LABEL: sched.step @table_wise world_size = 2 outputs = 1
// CHECK:       %[[L:[0-9]+]], %[[I:[0-9]+]], %[[S:[0-9]+]] = sparse.route
// CHECK:       %[[RL:[0-9]+]] = coll.all_to_all %[[L]] {{.*}} role #coll.role<input_lengths>
// CHECK-NEXT:  %[[RI:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[I]] {{.*}} role #coll.role<input_indices> send_splits(%[[S]] : tensor<2xi64>)
// CHECK-NEXT:  %[[ROWS:[0-9]+]], %[[SEND:[0-9]+]] = sparse.gather_rows %[[RL]], %[[RI]] table = #sparse.table<"item", rows = 100, dim = 8, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] {group = "item/table_wise"} : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:  %[[RECV:[0-9]+]] = sparse.row_splits %[[S]] dim = 8 {group = "item/table_wise"} : tensor<2xi64> -> tensor<2xi64>
// CHECK-NEXT:  %[[OUT:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[ROWS]] on #coll.group<[0, 1]> role #coll.role<output_rows> send_splits(%[[SEND]] : tensor<2xi64>) recv_splits(%[[RECV]] : tensor<2xi64>) {group = "item/table_wise"} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:  %[[H0:[0-9]+]], %[[H1:[0-9]+]] = sparse.expand_rows %[[OUT]], %[[L]] layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 8], [0 : 0, 0 : 0]]> dim = 8 {group = "item/table_wise"} : tensor<?xf32>, tensor<?xi32> -> tensor<?x8xf32>, tensor<?x8xf32>
// CHECK-NOT:   sparse.lookup
// CHECK:       sched.yield %{{[^,]+}}, %[[RI]], %[[L]], %[[SEND]], %[[RECV]] : tensor<?xf32>, tensor<?xi64>, tensor<?xi32>, tensor<2xi64>, tensor<2xi64>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%g: tensor<?xf32>, %[[SI:[0-9]+]]: tensor<?xi64>, %[[SL:[0-9]+]]: tensor<?xi32>, %[[SS:[0-9]+]]: tensor<2xi64>, %[[SR:[0-9]+]]: tensor<2xi64>):
// CHECK-NEXT:  %g0, %g1 = sched.dense @dense_post(%g) phase "backward"
// CHECK-NEXT:  %[[C:[0-9]+]] = sparse.compact_rows %[[SL]], %g0, %g1 layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 8], [0 : 0, 0 : 0]]> dim = 8
// CHECK-NEXT:  %[[GR:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[C]] on #coll.group<[0, 1]> role #coll.role<grad_rows> send_splits(%[[SR]] : tensor<2xi64>) recv_splits(%[[SS]] : tensor<2xi64>)
// CHECK-NEXT:  sparse.rows_update %[[SI]] grad %[[GR]] table = #sparse.table<"item", rows = 100, dim = 8, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] optimizer = #sparse.optimizer<sgd> {group = "item/table_wise"} : tensor<?xi64>, tensor<?xf32>
// CHECK-NEXT:  sched.yield

// Option: under min-empty-share 0.5 the 12.5% of empty bags do not pay for the scatter; the
// padded exchange stays, with the remark.
// SHARE-LABEL: sched.step @table_wise
// SHARE:       sparse.lookup {{.*}} table = #sparse.table<"item"
// SHARE:       coll.all_to_all {{.*}} role #coll.role<output_rows> splits #coll.splits<{{\[\[}}16, 16], [0, 0]]> {group = "item/table_wise", remark = #sched.remark<"compact-rows", "empty-share", "not compacted: 12% of the padded rows of table 'item' are empty, under min-empty-share 0.5">}
// SHARE-NOT:   sparse.gather_rows

// After generate-kernels the lookups are fused: compact-rows runs on the lifted per-table ops
// (the compiler lowers with `lift-sparse{rows=jagged}`), so it leaves this one with the remark.
// FUSED-LABEL: sched.step @table_wise
// FUSED:       sparse.fused_lookup
// FUSED:       coll.all_to_all {{.*}} role #coll.role<output_rows> {{.*}} remark = #sched.remark<"compact-rows", "shape", "not compacted: the rows are not a sparse.lookup's, read by the packs alone">
// FUSED-NOT:   sparse.gather_rows
sched.step @table_wise world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %h0, %h1 = sparse.embedding_bag_collection "item" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"item", rows = 100, dim = 8, f32, none>] features = [#sparse.feature<"hist[0]" -> "item", pooling_factor = 1.0>, #sparse.feature<"hist[1]" -> "item", pooling_factor = 0.75>] placements = [#sparse.placement<"item", table_wise, rank = 0>] {group = "item/table_wise"} -> tensor<?x8xf32>, tensor<?x8xf32>
  %out = sched.dense @dense_post(%h0, %h1) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb1(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  sched.yield
}

// -----

// A row-wise unpooled table. Padded, every rank looks up every bag (zeros outside its row range)
// and the partial rows are summed (coll.reduce_scatter): 62% of those rows are empty (half of
// them by the ranges, and a quarter of the bags). Compacted, each id's row comes back from the
// rank whose range holds it, and expand_rows takes each bag's row from that rank's segment (the
// layout: every member in both segments). Backward, each rank gets its ids' gradients back.
// CHECK-LABEL: sched.step @row_wise world_size = 2 outputs = 1
// CHECK:       %[[L:[0-9]+]], %[[I:[0-9]+]], %[[S:[0-9]+]] = sparse.route {{.*}} placements = [#sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>]
// CHECK:       %[[RL:[0-9]+]] = coll.all_to_all %[[L]] {{.*}} role #coll.role<input_lengths>
// CHECK-NEXT:  %[[RI:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[I]] {{.*}} role #coll.role<input_indices>
// CHECK-NEXT:  %[[ROWS:[0-9]+]], %[[SEND:[0-9]+]] = sparse.gather_rows %[[RL]], %[[RI]] {{.*}} placement = #sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]> slots = [0, 1]
// CHECK-NEXT:  %[[RECV:[0-9]+]] = sparse.row_splits %[[S]] dim = 8
// CHECK-NEXT:  %[[OUT:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[ROWS]] on #coll.group<[0, 1]> role #coll.role<output_rows> send_splits(%[[SEND]] : tensor<2xi64>) recv_splits(%[[RECV]] : tensor<2xi64>)
// CHECK-NEXT:  %{{[0-9]+}}, %{{[0-9]+}} = sparse.expand_rows %[[OUT]], %[[L]] layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 8], [0 : 8, 8 : 8]]> dim = 8
// CHECK-NOT:   coll.reduce_scatter
// CHECK:       } backward {
// CHECK:       %[[C:[0-9]+]] = sparse.compact_rows %{{[0-9]+}}, %g0, %g1 layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 8], [0 : 8, 8 : 8]]> dim = 8
// CHECK-NEXT:  %[[GR:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[C]] on #coll.group<[0, 1]> role #coll.role<grad_rows> send_splits
// CHECK-NEXT:  sparse.rows_update %{{[0-9]+}} grad %[[GR]] {{.*}} placement = #sparse.placement<"item", row_wise
// CHECK-NOT:   sparse.lookup_update

// Option: min-empty-share 0.7 is above the row-wise table's 62% of empty padded rows: the
// padded path stays, with the remark.
// RW-SHARE-LABEL: sched.step @row_wise
// RW-SHARE:       sparse.lookup {{.*}} table = #sparse.table<"item"
// RW-SHARE:       coll.reduce_scatter {{.*}} role #coll.role<output_rows> {{.*}} remark = #sched.remark<"compact-rows", "empty-share", "not compacted: 62% of the padded rows of table 'item' are empty, under min-empty-share 0.7">
// RW-SHARE-NOT:   sparse.gather_rows
// Under min-empty-share 0.5 (the table-wise case's refusal above) the 62% pays: compacted.
// SHARE-LABEL: sched.step @row_wise
// SHARE:       sparse.gather_rows
sched.step @row_wise world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %h0, %h1 = sparse.embedding_bag_collection "item" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"item", rows = 100, dim = 8, f32, none>] features = [#sparse.feature<"hist[0]" -> "item", pooling_factor = 1.0>, #sparse.feature<"hist[1]" -> "item", pooling_factor = 0.5>] placements = [#sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>] {group = "item/row_wise"} -> tensor<?x8xf32>, tensor<?x8xf32>
  %out = sched.dense @dense_post(%h0, %h1) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb1(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  sched.yield
}

// -----

// A pooled table's exchanges (output_pooled) are not rows: left alone, no remark.
// CHECK-LABEL: sched.step @pooled
// CHECK:       sparse.lookup
// CHECK:       role #coll.role<output_pooled>
// CHECK-NOT:   compact-rows
sched.step @pooled world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 0.5>] placements = [#sparse.placement<"t0", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0) phase "forward" : (tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb1(%g: tensor<?xf32>):
  %g0 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x8xf32>
  sched.yield
}
