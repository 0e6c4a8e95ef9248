// RUN: sparselift-opt %s --split-input-file -p lift-sparse,aggregate-comm | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,aggregate-comm{roles=output_pooled,grad_pooled}' | filecheck %s --check-prefix=NOINPUT
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,aggregate-comm{max-bytes=100}' | filecheck %s --check-prefix=CAP
// RUN: sparselift-opt %S/../inputs/two-tower-ws2.mlir -p lift-sparse,aggregate-comm | filecheck %s --check-prefix=TOWERS

// aggregate-comm with role `input`: the exchanged groups' routes become one, and their lengths,
// ids and weights one jagged exchange (sparse.pack_ids / sparse.unpack_ids).

// Two table-wise groups: one route over both features, one packed exchange; group b's table
// (rank 0) keeps slot 0, group a's (rank 1) too: on each rank the other group serves nothing.
// CHECK-LABEL: sched.step @two_groups
// CHECK:         %[[L:.*]], %[[I:.*]], %{{.*}} = sparse.route ids(%i0, %i1 {{.*}} {group = "a/table_wise+b/table_wise"}
// CHECK-NEXT:    %[[B:.*]], %[[S:.*]] = sparse.pack_ids %[[L]], %[[I]] features = [1, 1]
// CHECK-NEXT:    %[[R:.*]], %[[RS:.*]] = coll.all_to_all %[[B]] on #coll.group<[0, 1]> role #coll.role<input_packed> send_splits(%[[S]] : tensor<2xi64>)
// CHECK-NEXT:    %[[RL:.*]], %[[RI:.*]] = sparse.unpack_ids %[[R]], %[[RS]] features = [1, 1]
// CHECK-NEXT:    sparse.lookup %[[RL]], %[[RI]] table = #sparse.table<"ta"{{.*}} slots = [0]
// CHECK-NEXT:    sparse.lookup %[[RL]], %[[RI]] table = #sparse.table<"tb"{{.*}} slots = [0]
// CHECK-NOT:     role #coll.role<input_
// CHECK:         sched.yield %{{.*}}, %[[RL]], %[[RI]] :
// CHECK:       } backward {
// CHECK-NEXT:  ^bb0(%g: tensor<?x1xf32>, %[[SL:.*]]: tensor<?xi32>, %[[SI:.*]]: tensor<?xi64>):
// CHECK:         sparse.lookup_update %[[SL]], %[[SI]] {{.*}}"tb"
// CHECK:         sparse.lookup_update %[[SL]], %[[SI]] {{.*}}"ta"
// Without role `input` the exchanges stay per group.
// NOINPUT-LABEL: sched.step @two_groups
// NOINPUT-NOT:     sparse.pack_ids
// NOINPUT-COUNT-2: role #coll.role<input_lengths>
// The packed buffer (lengths + ids, 8 bytes each, batch 4) is over 100 bytes.
// CAP-LABEL: sched.step @two_groups
// CAP-NOT:     sparse.pack_ids
// CAP:         role #coll.role<input_lengths> {{.*}}remark = #sched.remark<"aggregate-comm", "max-bytes", "input exchanges not merged: the packed buffer would hold 192 bytes, over max-bytes 100">
sched.step @two_groups world_size = 2 outputs = 1 attributes {batch = "4"} {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "a" ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) tables = [#sparse.table<"ta", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"fa" -> "ta", pooling_factor = 2.0>] placements = [#sparse.placement<"ta", table_wise, rank = 1>] {group = "a/table_wise"} -> tensor<?x8xf32>
  %p1 = sparse.embedding_bag_collection "b" ids(%i1 : tensor<?xi64>) offsets(%o1 : tensor<?xi64>) tables = [#sparse.table<"tb", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"fb" -> "tb", pooling_factor = 2.0>] placements = [#sparse.placement<"tb", table_wise, rank = 0>] {group = "b/table_wise"} -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x1xf32>
  sched.yield %out : tensor<?x1xf32>
} backward {
^bb0(%g: tensor<?x1xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?x1xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  sched.yield
}

// -----

// Refused: the groups' ids have different dtypes (no cast of ids); the first group alone still
// goes through one packed exchange.
// CHECK-LABEL: sched.step @two_groups_int32
// CHECK:         sparse.pack_ids
// CHECK:         role #coll.role<input_packed>
// CHECK:         role #coll.role<input_lengths> {{.*}}remark = #sched.remark<"aggregate-comm", "index-dtype", "input exchanges not merged: index dtypes differ">
// CHECK:         role #coll.role<input_indices>
sched.step @two_groups_int32 world_size = 2 outputs = 1 attributes {batch = "4"} {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi32>, %o1: tensor<?xi32>):
  %p0 = sparse.embedding_bag_collection "a" ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) tables = [#sparse.table<"ta", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"fa" -> "ta", pooling_factor = 2.0>] placements = [#sparse.placement<"ta", table_wise, rank = 1>] {group = "a/table_wise"} -> tensor<?x8xf32>
  %p1 = sparse.embedding_bag_collection "b" ids(%i1 : tensor<?xi32>) offsets(%o1 : tensor<?xi32>) tables = [#sparse.table<"tb", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"fb" -> "tb", pooling_factor = 2.0>] placements = [#sparse.placement<"tb", table_wise, rank = 0>] {group = "b/table_wise"} -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x1xf32>
  sched.yield %out : tensor<?x1xf32>
} backward {
^bb0(%g: tensor<?x1xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?x1xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  sched.yield
}

// -----

// Refused: group b's ids come out of a dense region that runs after group a's route, where the
// merged route would go.
// CHECK-LABEL: sched.step @ids_computed_later
// CHECK:         role #coll.role<input_packed>
// CHECK:         sched.dense @hash_ids
// CHECK:         role #coll.role<input_lengths> {{.*}}remark = #sched.remark<"aggregate-comm", "order", "input exchanges not merged: the ids of group 'b/table_wise' are computed after the route of group 'a/table_wise'">

// Two towers, three exchanged tables and one weighted feature: 5 input exchanges become one;
// the item tower's tables on rank 1 move past the user tower's 2 features there.
// TOWERS-LABEL: sched.step @step
// TOWERS:         sparse.pack_ids {{.*}} weights {{.*}} features = [1, 4]
// TOWERS-NEXT:    coll.all_to_all {{.*}} role #coll.role<input_packed>
// TOWERS-NEXT:    sparse.unpack_ids {{.*}} -> tensor<?xi32>, tensor<?xi64>, tensor<?xf32>
// TOWERS:         table = #sparse.table<"item.emb.0"{{.*}} slots = [2]
// TOWERS:         table = #sparse.table<"item.tag_weight"{{.*}} slots = [3]
// TOWERS-NOT:     role #coll.role<input_lengths>
sched.step @ids_computed_later world_size = 2 outputs = 1 attributes {batch = "4"} {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "a" ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) tables = [#sparse.table<"ta", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"fa" -> "ta", pooling_factor = 2.0>] placements = [#sparse.placement<"ta", table_wise, rank = 1>] {group = "a/table_wise"} -> tensor<?x8xf32>
  %h1 = sched.dense @hash_ids(%i1) phase "forward" : (tensor<?xi64>) -> tensor<?xi64>
  %p1 = sparse.embedding_bag_collection "b" ids(%h1 : tensor<?xi64>) offsets(%o1 : tensor<?xi64>) tables = [#sparse.table<"tb", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"fb" -> "tb", pooling_factor = 2.0>] placements = [#sparse.placement<"tb", table_wise, rank = 0>] {group = "b/table_wise"} -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x1xf32>
  sched.yield %out : tensor<?x1xf32>
} backward {
^bb0(%g: tensor<?x1xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?x1xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  %gh = sched.dense @hash_ids(%g) phase "backward" : (tensor<?x1xf32>) -> tensor<?xi64>
  sched.yield
}
