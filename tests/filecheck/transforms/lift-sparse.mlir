// RUN: sparselift-opt %s --split-input-file -p lift-sparse | sparselift-opt --split-input-file | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse{optimizer=rowwise_adagrad}' | filecheck %s --check-prefix=ADAGRAD
// RUN: sed -n '/^sched.step @options /,/^}$/p' %s | sparselift-opt -p 'lift-sparse{optimizer=adam table-optimizers="t1=partial_rowwise_adam:1"}' | filecheck %s --check-prefix=PER-TABLE
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse{narrow-ids=true}' | filecheck %s --check-prefix=NARROW

// lift-sparse on small hand-written steps, modelled on the opaque IR `sparselift export` prints
// (the ids/offsets are step arguments instead of @sparse_inputs results). The first RUN also
// re-parses the lifted IR; the second one runs the pass with options (the @options case).

// Table-wise over 2 ranks (t0 on rank 1, t1 on rank 0): ids go to the owner, each owner
// pools its table, per-rank packs come back through one all-to-all and a permute restores
// model order. Backward sends the pooled gradients the reverse way.
// CHECK-LABEL: sched.step @table_wise world_size = 2 outputs = 1
// CHECK:       %[[L:[0-9]+]], %[[I:[0-9]+]], %[[S:[0-9]+]] = sparse.route ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>)
// CHECK-SAME:    world_size = 2 {group = "emb/table_wise"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
// CHECK-NEXT:  %[[RL:[0-9]+]] = coll.all_to_all %[[L]] on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}1, 1], [1, 1]]> {group = "emb/table_wise"} : tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:  %[[RI:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[I]] on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%[[S]] : tensor<2xi64>) {{.*}} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
// CHECK-NEXT:  %[[T0:[0-9]+]] = sparse.lookup %[[RL]], %[[RI]] table = #sparse.table<"t0", rows = 100, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 1> slots = [0] {{.*}} -> tensor<?x8xf32>
// CHECK-NEXT:  %[[T1:[0-9]+]] = sparse.lookup %[[RL]], %[[RI]] table = #sparse.table<"t1", rows = 50, dim = 4, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 0> slots = [0] {{.*}} -> tensor<?x4xf32>
// CHECK-NEXT:  %[[P0:[0-9]+]] = sparse.pack %[[T1]] layout = #sparse.layout<{{\[\[}}0 : 4], [0 : 4]]> on_rank 0 {{.*}} : tensor<?x4xf32> -> tensor<?xf32>
// CHECK-NEXT:  %[[P1:[0-9]+]] = sparse.pack %[[T0]] layout = #sparse.layout<{{\[\[}}0 : 8], [0 : 8]]> on_rank 1 {{.*}} : tensor<?x8xf32> -> tensor<?xf32>
// CHECK-NEXT:  %[[OUT:[0-9]+]] = coll.all_to_all %[[P0]], %[[P1]] on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}4, 4], [8, 8]]> {{.*}} : tensor<?xf32>, tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:  %[[U1:[0-9]+]], %[[U0:[0-9]+]] = sparse.unpack %[[OUT]] layout = #sparse.layout<{{\[\[}}0 : 4, 0 : 0], [0 : 0, 0 : 8]]> {{.*}} : tensor<?xf32> -> tensor<?x4xf32>, tensor<?x8xf32>
// CHECK-NEXT:  %[[F0:[^ ,]+]], %[[F1:[^ ,]+]] = sparse.permute %[[U1]], %[[U0]] order = [1, 0] {{.*}} : tensor<?x4xf32>, tensor<?x8xf32> -> tensor<?x8xf32>, tensor<?x4xf32>
// CHECK-NEXT:  %out = sched.dense @dense_post(%[[F0]], %[[F1]]) phase "forward"
// CHECK-NEXT:  sched.yield %out, %[[RL]], %[[RI]] : tensor<?xf32>, tensor<?xi32>, tensor<?xi64>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%g: tensor<?xf32>, %[[SL:[0-9]+]]: tensor<?xi32>, %[[SI:[0-9]+]]: tensor<?xi64>):
// CHECK-NEXT:  %g0, %g1 = sched.dense @dense_post(%g) phase "backward"
// CHECK-NEXT:  %[[GP:[0-9]+]] = sparse.pack %g1, %g0 layout = #sparse.layout<{{\[\[}}0 : 4, 0 : 0], [0 : 0, 0 : 8]]> {{.*}} : tensor<?x4xf32>, tensor<?x8xf32> -> tensor<?xf32>
// CHECK-NEXT:  %[[GR:[0-9]+]] = coll.all_to_all %[[GP]] on #coll.group<[0, 1]> role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}4, 8], [4, 8]]> {{.*}} : tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:  %[[G1:[0-9]+]] = sparse.unpack %[[GR]] layout = #sparse.layout<{{\[\[}}0 : 4], [0 : 4]]> on_rank 0 {{.*}} -> tensor<?x4xf32>
// CHECK-NEXT:  %[[G0:[0-9]+]] = sparse.unpack %[[GR]] layout = #sparse.layout<{{\[\[}}0 : 8], [0 : 8]]> on_rank 1 {{.*}} -> tensor<?x8xf32>
// CHECK-NEXT:  sparse.lookup_update %[[SL]], %[[SI]] grad %[[G0]] table = #sparse.table<"t0", {{.*}}> placement = #sparse.placement<"t0", table_wise, rank = 1> slots = [0] optimizer = #sparse.optimizer<sgd> {{.*}} : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
// CHECK-NEXT:  sparse.lookup_update %[[SL]], %[[SI]] grad %[[G1]] table = #sparse.table<"t1", {{.*}}> placement = #sparse.placement<"t1", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<sgd> {{.*}} : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32>
// CHECK-NEXT:  sched.yield
// CHECK-NOT:   sparse.embedding_bag_collection
sched.step @table_wise world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 0>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// Option narrow-ids: the model's i64 ids are routed as i32 (the tables have fewer than 2^31
// rows; the route checks each id against its table before it narrows it), so the ids exchange
// and the lookups read half the bytes. Without the option they stay i64 (CHECK above).
// NARROW-LABEL: sched.step @table_wise
// NARROW:       %{{[0-9]+}}, %[[I:[0-9]+]], %{{[0-9]+}} = sparse.route ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>)
// NARROW-SAME:    -> tensor<?xi32>, tensor<?xi32>, tensor<2xi64>
// NARROW:       coll.all_to_all %[[I]] {{.*}} role #coll.role<input_indices> {{.*}} : tensor<?xi32> -> tensor<?xi32>, tensor<2xi64>
// NARROW:       sparse.lookup {{.*}} table = #sparse.table<"t0"{{.*}} : tensor<?xi32>, tensor<?xi32> -> tensor<?x8xf32>

// -----

// Row-wise over 2 ranks: every rank serves every feature (ids bucketized by row range), pools
// its shard into W segments and a reduce_scatter sums the partial pools onto each sample's rank.
// Backward: every shard owner receives all pooled gradients (one all-to-all).
// CHECK-LABEL: sched.step @row_wise world_size = 2
// CHECK:       %[[L:[0-9]+]], %[[I:[0-9]+]], %[[S:[0-9]+]] = sparse.route
// CHECK-NEXT:  %[[RL:[0-9]+]] = coll.all_to_all %[[L]] {{.*}} role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}2, 2], [2, 2]]>
// CHECK-NEXT:  %[[RI:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[I]] {{.*}} role #coll.role<input_indices> send_splits(%[[S]] : tensor<2xi64>)
// CHECK-NEXT:  %[[T0:[0-9]+]] = sparse.lookup %[[RL]], %[[RI]] table = #sparse.table<"t0", {{.*}}> placement = #sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]> slots = [0] {{.*}} -> tensor<?x8xf32>
// CHECK-NEXT:  %[[T1:[0-9]+]] = sparse.lookup %[[RL]], %[[RI]] table = #sparse.table<"t1", {{.*}}> placement = #sparse.placement<"t1", row_wise, ranks = [0, 1], row_bounds = [0, 30, 60]> slots = [1] {{.*}} -> tensor<?x4xf32>
// CHECK-NEXT:  %[[PK:[0-9]+]] = sparse.pack %[[T0]], %[[T1]] layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 4], [0 : 8, 8 : 4]]> {{.*}} -> tensor<?xf32>
// CHECK-NEXT:  %[[RS:[0-9]+]] = coll.reduce_scatter %[[PK]] on #coll.group<[0, 1]> role #coll.role<output_pooled> reduce "sum" {{.*}} : tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:  %[[U0:[0-9]+]], %[[U1:[0-9]+]] = sparse.unpack %[[RS]] layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 4]]> {{.*}} -> tensor<?x8xf32>, tensor<?x4xf32>
// CHECK-NEXT:  sparse.permute %[[U0]], %[[U1]] order = [0, 1]
// CHECK:       } backward {
// CHECK:       %g0, %g1 = sched.dense @dense_post(%g) phase "backward"
// CHECK-NEXT:  %[[GP:[0-9]+]] = sparse.pack %g0, %g1 layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 4], [0 : 8, 8 : 4]]>
// CHECK-NEXT:  %[[GR:[0-9]+]] = coll.all_to_all %[[GP]] {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}12, 12], [12, 12]]>
// CHECK-NEXT:  %[[G0:[0-9]+]], %[[G1:[0-9]+]] = sparse.unpack %[[GR]] layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 4], [0 : 8, 8 : 4]]> {{.*}} -> tensor<?x8xf32>, tensor<?x4xf32>
// CHECK-NEXT:  sparse.lookup_update %{{[0-9]+}}, %{{[0-9]+}} grad %[[G0]] table = #sparse.table<"t0", {{.*}} slots = [0]
// CHECK-NEXT:  sparse.lookup_update %{{[0-9]+}}, %{{[0-9]+}} grad %[[G1]] table = #sparse.table<"t1", {{.*}} slots = [1]
// CHECK-NEXT:  sched.yield
sched.step @row_wise world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 60, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>, #sparse.placement<"t1", row_wise, ranks = [0, 1], row_bounds = [0, 30, 60]>] {group = "emb/row_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// -----

// Data-parallel over 2 ranks: no input or output exchange, so no pack or unpack either (the
// local regroup is folded); backward computes each table's dense gradient from the dense
// region's gradients, all-reduces it and applies it with the dense form of lookup_update.
// CHECK-LABEL: sched.step @data_parallel world_size = 2
// CHECK:       %[[L:[0-9]+]], %[[I:[0-9]+]], %{{[0-9]+}} = sparse.route
// CHECK-NOT:   coll.
// CHECK:       sparse.lookup %[[L]], %[[I]] table = #sparse.table<"t0", {{.*}} placement = #sparse.placement<"t0", data_parallel> slots = [0]
// CHECK-NEXT:  sparse.lookup %[[L]], %[[I]] table = #sparse.table<"t1", {{.*}} placement = #sparse.placement<"t1", data_parallel> slots = [1]
// CHECK-NOT:   coll.
// CHECK:       sched.yield %out, %[[L]], %[[I]] :
// CHECK:       } backward {
// CHECK-NEXT:  ^bb0(%g: tensor<?xf32>, %[[SL:[0-9]+]]: tensor<?xi32>, %[[SI:[0-9]+]]: tensor<?xi64>):
// CHECK-NEXT:  %g0, %g1 = sched.dense @dense_post(%g) phase "backward"
// CHECK-NEXT:  %[[TG0:[0-9]+]] = sparse.lookup_grad %[[SL]], %[[SI]] grad %g0 table = #sparse.table<"t0", {{.*}} -> tensor<10x8xf32>
// CHECK-NEXT:  %[[TG1:[0-9]+]] = sparse.lookup_grad %[[SL]], %[[SI]] grad %g1 table = #sparse.table<"t1", {{.*}} -> tensor<6x4xf32>
// The group's dense gradients go in one aggregated all-reduce.
// CHECK-NEXT:  %[[R0:[0-9]+]], %[[R1:[0-9]+]] = coll.all_reduce %[[TG0]], %[[TG1]] on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {{.*}} : tensor<10x8xf32>, tensor<6x4xf32> -> tensor<10x8xf32>, tensor<6x4xf32>
// CHECK-NEXT:  sparse.lookup_update grad %[[R0]] table = #sparse.table<"t0", {{.*}} optimizer = #sparse.optimizer<sgd> {{.*}} : tensor<10x8xf32>
// CHECK-NEXT:  sparse.lookup_update grad %[[R1]] table = #sparse.table<"t1", {{.*}} : tensor<6x4xf32>
// CHECK-NEXT:  sched.yield
sched.step @data_parallel world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 8, f32, sum>, #sparse.table<"t1", rows = 6, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", data_parallel>, #sparse.placement<"t1", data_parallel>] {group = "emb/data_parallel"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// -----

// Three groups of one module in one step (row-wise, table-wise with an idle rank 0,
// data-parallel): each is lifted on its own, and saved values of all three reach backward.
// CHECK-LABEL: sched.step @mixed_groups world_size = 2
// CHECK:       sparse.route ids(%ids0 : tensor<?xi64>) {{.*}} {group = "emb/row_wise"}
// CHECK:       coll.reduce_scatter {{.*}} role #coll.role<output_pooled> reduce "sum" {group = "emb/row_wise"}
// CHECK:       sparse.route ids(%ids1 : tensor<?xi64>) {{.*}} {group = "emb/table_wise"}
// CHECK-NEXT:  coll.all_to_all {{.*}} role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}0, 1], [0, 1]]> {group = "emb/table_wise"}
// CHECK:       sparse.pack layout = #sparse.layout<[[], []]> on_rank 0 {group = "emb/table_wise"} : -> tensor<?xf32>
// CHECK:       coll.all_to_all {{.*}} role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}0, 0], [8, 8]]> {group = "emb/table_wise"}
// CHECK:       sparse.route ids(%ids2 : tensor<?xi64>) {{.*}} {group = "emb/data_parallel"}
// CHECK-NOT:   coll.
// CHECK:       sched.yield %out, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} :
// CHECK:       } backward {
// CHECK-NEXT:  ^bb0(%g: tensor<?xf32>, %{{.*}}: tensor<?xi32>, %{{.*}}: tensor<?xi64>, %{{.*}}: tensor<?xi32>, %{{.*}}: tensor<?xi64>, %{{.*}}: tensor<?xi32>, %{{.*}}: tensor<?xi64>):
// CHECK-DAG:   coll.all_reduce {{.*}} role #coll.role<sparse_grad> {{.*}} {group = "emb/data_parallel"}
// CHECK-DAG:   sparse.lookup_update grad %{{[0-9]+}} table = #sparse.table<"tiny"
// CHECK-DAG:   coll.all_to_all {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}0, 8], [0, 8]]> {group = "emb/table_wise"}
// CHECK-DAG:   sparse.lookup_update %{{[0-9]+}}, %{{[0-9]+}} grad %{{[0-9]+}} table = #sparse.table<"mid"
// CHECK-DAG:   coll.all_to_all {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}8, 8], [8, 8]]> {group = "emb/row_wise"}
// CHECK-DAG:   sparse.lookup_update %{{[0-9]+}}, %{{[0-9]+}} grad %{{[0-9]+}} table = #sparse.table<"big"
// CHECK:       sched.yield
sched.step @mixed_groups world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>, %ids2: tensor<?xi64>, %offs2: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"big", rows = 1000, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "big", pooling_factor = 1.0>] placements = [#sparse.placement<"big", row_wise, ranks = [0, 1], row_bounds = [0, 500, 1000]>] {group = "emb/row_wise"} -> tensor<?x8xf32>
  %p1 = sparse.embedding_bag_collection "emb" ids(%ids1 : tensor<?xi64>) offsets(%offs1 : tensor<?xi64>) tables = [#sparse.table<"mid", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f1" -> "mid", pooling_factor = 1.0>] placements = [#sparse.placement<"mid", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>
  %p2 = sparse.embedding_bag_collection "emb" ids(%ids2 : tensor<?xi64>) offsets(%offs2 : tensor<?xi64>) tables = [#sparse.table<"tiny", rows = 4, dim = 8, f32, sum>] features = [#sparse.feature<"f2" -> "tiny", pooling_factor = 1.0>] placements = [#sparse.placement<"tiny", data_parallel>] {group = "emb/data_parallel"} -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0, %p1, %p2) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1, %g2 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>)
  sched.yield
}

// -----

// A mean-pooled table (table-wise): the lookup and the update keep the table's pooling.
// CHECK-LABEL: sched.step @mean_pooling
// CHECK:       sparse.lookup {{.*}} table = #sparse.table<"t0", rows = 100, dim = 8, f32, mean> placement = #sparse.placement<"t0", table_wise, rank = 0>
// CHECK-NEXT:  sparse.lookup {{.*}} table = #sparse.table<"t1", rows = 50, dim = 4, f32, sum>
// CHECK:       } backward {
// CHECK:       sparse.lookup_update {{.*}} table = #sparse.table<"t0", rows = 100, dim = 8, f32, mean>
// CHECK-NEXT:  sparse.lookup_update {{.*}} table = #sparse.table<"t1", rows = 50, dim = 4, f32, sum>
sched.step @mean_pooling world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, mean>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 3.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// -----

// A weighted feature: the route also produces weights, they travel with the indices
// (same send_splits), only the weighted table's lookup/update read them, and they are saved.
// CHECK-LABEL: sched.step @weighted
// CHECK:       %[[L:[0-9]+]], %[[I:[0-9]+]], %[[S:[0-9]+]], %[[W:[0-9]+]] = sparse.route ids(%ids0, %ids1 : {{.*}}) offsets(%offs0, %offs1 : {{.*}}) weights(%w0 : tensor<?xf32>)
// CHECK-SAME:    -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>, tensor<?xf32>
// CHECK-NEXT:  %[[RL:[0-9]+]] = coll.all_to_all %[[L]] {{.*}} role #coll.role<input_lengths>
// CHECK-NEXT:  %[[RI:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[I]] {{.*}} role #coll.role<input_indices> send_splits(%[[S]] : tensor<2xi64>)
// CHECK-NEXT:  %[[RW:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[W]] on #coll.group<[0, 1]> role #coll.role<input_weights> send_splits(%[[S]] : tensor<2xi64>) {{.*}} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:  sparse.lookup %[[RL]], %[[RI]] weights %[[RW]] : tensor<?xf32> table = #sparse.table<"t0",
// CHECK-NEXT:  sparse.lookup %[[RL]], %[[RI]] table = #sparse.table<"t1",
// CHECK:       sched.yield %out, %[[RL]], %[[RI]], %[[RW]] : tensor<?xf32>, tensor<?xi32>, tensor<?xi64>, tensor<?xf32>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%g: tensor<?xf32>, %[[SL:[0-9]+]]: tensor<?xi32>, %[[SI:[0-9]+]]: tensor<?xi64>, %[[SW:[0-9]+]]: tensor<?xf32>):
// CHECK:       sparse.lookup_update %[[SL]], %[[SI]] weights %[[SW]] : tensor<?xf32> grad %{{[0-9]+}} table = #sparse.table<"t0",
// CHECK-NEXT:  sparse.lookup_update %[[SL]], %[[SI]] grad %{{[0-9]+}} table = #sparse.table<"t1",
sched.step @weighted world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %w0: tensor<?xf32>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) weights(%w0 : tensor<?xf32>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// -----

// Two features share t0 (f0 and f2, with f1 in between): one lookup with two slots and a
// double-width result; unpack splits it per feature and the permute restores f0, f1, f2.
// CHECK-LABEL: sched.step @shared_table
// CHECK:       coll.all_to_all {{.*}} role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}2, 1], [2, 1]]>
// CHECK:       %[[T0:[0-9]+]] = sparse.lookup {{.*}} table = #sparse.table<"t0", {{.*}} slots = [0, 1] {{.*}} -> tensor<?x16xf32>
// CHECK-NEXT:  %[[T1:[0-9]+]] = sparse.lookup {{.*}} table = #sparse.table<"t1", {{.*}} slots = [0] {{.*}} -> tensor<?x4xf32>
// CHECK-NEXT:  sparse.pack %[[T0]] layout = #sparse.layout<{{\[\[}}0 : 16], [0 : 16]]> on_rank 0
// CHECK-NEXT:  sparse.pack %[[T1]] layout = #sparse.layout<{{\[\[}}0 : 4], [0 : 4]]> on_rank 1
// CHECK-NEXT:  coll.all_to_all {{.*}} role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}16, 16], [4, 4]]>
// CHECK-NEXT:  %[[A:[0-9]+]], %[[B:[0-9]+]], %[[C:[0-9]+]] = sparse.unpack %{{[0-9]+}} layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 8, 0 : 0], [0 : 0, 0 : 0, 0 : 4]]> {{.*}} -> tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x4xf32>
// CHECK-NEXT:  sparse.permute %[[A]], %[[B]], %[[C]] order = [0, 2, 1] {{.*}} -> tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x8xf32>
// CHECK:       } backward {
// CHECK:       sparse.pack %g0, %g2, %g1 layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 8, 0 : 0], [0 : 0, 0 : 0, 0 : 4]]>
// CHECK-NEXT:  coll.all_to_all {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}16, 4], [16, 4]]>
// CHECK-NEXT:  %[[G0:[0-9]+]] = sparse.unpack {{.*}} on_rank 0 {{.*}} -> tensor<?x16xf32>
// CHECK-NEXT:  %[[G1:[0-9]+]] = sparse.unpack {{.*}} on_rank 1 {{.*}} -> tensor<?x4xf32>
// CHECK-NEXT:  sparse.lookup_update {{.*}} grad %[[G0]] table = #sparse.table<"t0", {{.*}} slots = [0, 1] {{.*}} tensor<?x16xf32>
// CHECK-NEXT:  sparse.lookup_update {{.*}} grad %[[G1]] table = #sparse.table<"t1", {{.*}} slots = [0] {{.*}} tensor<?x4xf32>
sched.step @shared_table world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>, %ids2: tensor<?xi64>, %offs2: tensor<?xi64>):
  %p0, %p1, %p2 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1, %ids2 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1, %offs2 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>, #sparse.feature<"f2" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0, %p1, %p2) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1, %g2 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x8xf32>)
  sched.yield
}

// -----

// World size 1: the same lookups and updates, no collective at all, and no pack or unpack
// (the local regroup is folded).
// CHECK-LABEL: sched.step @world_size_1 world_size = 1
// CHECK-NOT:   coll.
// CHECK:       sparse.route {{.*}} world_size = 1 {{.*}} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
// CHECK-NOT:   coll.
// CHECK:       %[[A:[0-9]+]] = sparse.lookup {{.*}} table = #sparse.table<"t0", {{.*}} slots = [0]
// CHECK-NEXT:  %[[B:[0-9]+]] = sparse.lookup {{.*}} table = #sparse.table<"t1", {{.*}} slots = [1]
// CHECK-NEXT:  sparse.permute %[[A]], %[[B]] order = [0, 1]
// CHECK-NOT:   sparse.pack
// CHECK-NOT:   coll.
// CHECK:       sparse.lookup_update {{.*}} table = #sparse.table<"t0",
// CHECK-NEXT:  sparse.lookup_update {{.*}} table = #sparse.table<"t1",
// CHECK-NOT:   coll.
// CHECK:       sched.yield
sched.step @world_size_1 world_size = 1 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// -----

// World size 3, one table per rank: 3x3 splits everywhere.
// CHECK-LABEL: sched.step @world_size_3 world_size = 3
// CHECK:       sparse.route {{.*}} world_size = 3 {{.*}} -> tensor<?xi32>, tensor<?xi64>, tensor<3xi64>
// CHECK-NEXT:  coll.all_to_all {{.*}} on #coll.group<[0, 1, 2]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}1, 1, 1], [1, 1, 1], [1, 1, 1]]>
// CHECK-NEXT:  coll.all_to_all {{.*}} on #coll.group<[0, 1, 2]> role #coll.role<input_indices> send_splits(%{{[0-9]+}} : tensor<3xi64>) {{.*}} -> tensor<?xi64>, tensor<3xi64>
// CHECK-COUNT-3: sparse.lookup
// CHECK-NEXT:  sparse.pack {{.*}} on_rank 0
// CHECK-NEXT:  sparse.pack {{.*}} on_rank 1
// CHECK-NEXT:  sparse.pack {{.*}} on_rank 2
// CHECK-NEXT:  coll.all_to_all %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} on #coll.group<[0, 1, 2]> role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}8, 8, 8], [4, 4, 4], [16, 16, 16]]>
// CHECK-NEXT:  sparse.unpack {{.*}} layout = #sparse.layout<{{\[\[}}0 : 8, 0 : 0, 0 : 0], [0 : 0, 0 : 4, 0 : 0], [0 : 0, 0 : 0, 0 : 16]]>
// CHECK:       } backward {
// CHECK:       coll.all_to_all {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}8, 4, 16], [8, 4, 16], [8, 4, 16]]>
// CHECK-NEXT:  sparse.unpack {{.*}} on_rank 0 {{.*}} -> tensor<?x8xf32>
// CHECK-NEXT:  sparse.unpack {{.*}} on_rank 1 {{.*}} -> tensor<?x4xf32>
// CHECK-NEXT:  sparse.unpack {{.*}} on_rank 2 {{.*}} -> tensor<?x16xf32>
// CHECK-COUNT-3: sparse.lookup_update
sched.step @world_size_3 world_size = 3 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>, %ids2: tensor<?xi64>, %offs2: tensor<?xi64>):
  %p0, %p1, %p2 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1, %ids2 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1, %offs2 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>, #sparse.table<"t2", rows = 70, dim = 16, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>, #sparse.feature<"f2" -> "t2", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>, #sparse.placement<"t2", table_wise, rank = 2>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x16xf32>
  %out = sched.dense @dense_post(%p0, %p1, %p2) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x16xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1, %g2 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x16xf32>)
  sched.yield
}

// -----

// World size 3 with no table on rank 1: rank 1 is sent no lengths, packs an empty buffer
// (no members) and gets no gradient to unpack.
// CHECK-LABEL: sched.step @idle_rank world_size = 3
// CHECK:       coll.all_to_all {{.*}} role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}1, 0, 1], [1, 0, 1], [1, 0, 1]]>
// CHECK:       %[[P0:[0-9]+]] = sparse.pack %{{[0-9]+}} layout = #sparse.layout<{{\[\[}}0 : 8], [0 : 8], [0 : 8]]> on_rank 0
// CHECK-NEXT:  %[[P1:[0-9]+]] = sparse.pack layout = #sparse.layout<[[], [], []]> on_rank 1 {{.*}} : -> tensor<?xf32>
// CHECK-NEXT:  %[[P2:[0-9]+]] = sparse.pack %{{[0-9]+}} layout = #sparse.layout<{{\[\[}}0 : 4], [0 : 4], [0 : 4]]> on_rank 2
// CHECK-NEXT:  coll.all_to_all %[[P0]], %[[P1]], %[[P2]] {{.*}} role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}8, 8, 8], [0, 0, 0], [4, 4, 4]]>
// CHECK-NEXT:  sparse.unpack {{.*}} layout = #sparse.layout<{{\[\[}}0 : 8, 0 : 0], [0 : 0, 0 : 0], [0 : 0, 0 : 4]]>
// CHECK:       } backward {
// CHECK:       coll.all_to_all {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}8, 0, 4], [8, 0, 4], [8, 0, 4]]>
// CHECK-NEXT:  sparse.unpack {{.*}} on_rank 0
// CHECK-NEXT:  sparse.unpack {{.*}} on_rank 2
sched.step @idle_rank world_size = 3 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 2>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// -----

// Pooled outputs that are model outputs: their gradients are the backward block's own
// arguments. i32 ids keep i32 indices; f16 tables exchange f16 buffers.
// CHECK-LABEL: sched.step @pooled_is_output world_size = 2 outputs = 2
// CHECK:       sparse.route {{.*}} -> tensor<?xi32>, tensor<?xi32>, tensor<2xi64>
// CHECK:       coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}} : tensor<?xf16>, tensor<?xf16> -> tensor<?xf16>
// CHECK:       %[[F0:[^ ,]+]], %[[F1:[^ ,]+]] = sparse.permute
// CHECK-NEXT:  sched.yield %[[F0]], %[[F1]], %{{[0-9]+}}, %{{[0-9]+}} : tensor<?x8xf16>, tensor<?x4xf16>, tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%g0: tensor<?x8xf16>, %g1: tensor<?x4xf16>, %{{[0-9]+}}: tensor<?xi32>, %{{[0-9]+}}: tensor<?xi32>):
// CHECK-NEXT:  sparse.pack %g0, %g1 layout = #sparse.layout<{{\[\[}}0 : 8, 0 : 0], [0 : 0, 0 : 4]]> {{.*}} -> tensor<?xf16>
sched.step @pooled_is_output world_size = 2 outputs = 2 {
^bb0(%ids0: tensor<?xi32>, %offs0: tensor<?xi32>, %ids1: tensor<?xi32>, %offs1: tensor<?xi32>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi32>, tensor<?xi32>) offsets(%offs0, %offs1 : tensor<?xi32>, tensor<?xi32>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f16, sum>, #sparse.table<"t1", rows = 50, dim = 4, f16, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf16>, tensor<?x4xf16>
  sched.yield %p0, %p1 : tensor<?x8xf16>, tensor<?x4xf16>
} backward {
^bb0(%g0: tensor<?x8xf16>, %g1: tensor<?x4xf16>):
  sched.yield
}

// -----

// The pass options pick the optimizer fused into every lookup_update (second RUN line), or
// per table (`table-optimizers`, third: t1 in hyperparameter group 1). No hyperparameter is in
// the IR: they are run-time values of the group.
// CHECK-LABEL:   sched.step @options
// CHECK:           sparse.lookup_update {{.*}} optimizer = #sparse.optimizer<sgd> {
// ADAGRAD-LABEL:   sched.step @options
// ADAGRAD-COUNT-2: sparse.lookup_update {{.*}} optimizer = #sparse.optimizer<rowwise_adagrad> {
// PER-TABLE-LABEL: sched.step @options
// PER-TABLE-DAG:   sparse.lookup_update {{.*}} table = #sparse.table<"t0"{{.*}} optimizer = #sparse.optimizer<adam> {
// PER-TABLE-DAG:   sparse.lookup_update {{.*}} table = #sparse.table<"t1"{{.*}} optimizer = #sparse.optimizer<partial_rowwise_adam, group = 1> {
sched.step @options world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// -----

// narrow-ids leaves a group's ids i64 when one of its tables has 2^31 rows or more: an id of
// such a table may not fit 32 bits.
// CHECK-LABEL: sched.step @huge_table
// CHECK:       sparse.route {{.*}} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
// NARROW-LABEL: sched.step @huge_table
// NARROW:       sparse.route {{.*}} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
// NARROW:       coll.all_to_all {{.*}} role #coll.role<input_indices> {{.*}} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
sched.step @huge_table world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 2147483648, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0) phase "forward" : (tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x4xf32>
  sched.yield
}
