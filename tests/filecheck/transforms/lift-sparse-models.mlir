// lift-sparse on the exported built-in models (fixtures in ../inputs, made by
// ../inputs/regenerate.sh with `sparselift export ... --batch-size 8 --sharding auto`).
// Per fixture, one RUN counts lookups/updates (the COUNT-n checks are followed by a NOT of the
// same pattern, so the counts are exact) and one checks the structure of the lifted step.

// dlrm-kaggle, world size 2 (rows-cap 20000): 26 tables, 11 tiny ones data-parallel, 15 table-wise
// (7 on rank 0, 8 on rank 1).
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p lift-sparse | filecheck %s --check-prefix=KAGGLE2-TOTAL
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p lift-sparse | filecheck %s --check-prefix=KAGGLE2
// KAGGLE2-TOTAL-NOT:     sparse.embedding_bag_collection
// KAGGLE2-TOTAL-LABEL:   sched.step @step world_size = 2 outputs = 1
// KAGGLE2-TOTAL-COUNT-26: sparse.lookup {{.*}} table = #sparse.table<"emb_l.{{[0-9]+}}"
// KAGGLE2-TOTAL-NOT:     sparse.lookup {{.*}} table =
// KAGGLE2-TOTAL:         } backward {
// KAGGLE2-TOTAL-COUNT-26: sparse.lookup_update {{.*}} table = #sparse.table<"emb_l.{{[0-9]+}}"
// KAGGLE2-TOTAL-NOT:     sparse.lookup_update
// KAGGLE2-TOTAL-NOT:     sparse.embedding_bag_collection

// KAGGLE2-LABEL:    sched.step @step world_size = 2 outputs = 1 attributes {batch = "8", model = "DLRM"}
// KAGGLE2:          %[[L:[0-9]+]], %[[I:[0-9]+]], %[[S:[0-9]+]] = sparse.route {{.*}} world_size = 2 {group = "emb_l/table_wise"}
// KAGGLE2-NEXT:     %[[RL:[0-9]+]] = coll.all_to_all %[[L]] on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}7, 8], [7, 8]]>
// KAGGLE2-NEXT:     %[[RI:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[I]] on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%[[S]] : tensor<2xi64>)
// KAGGLE2-COUNT-15: sparse.lookup %[[RL]], %[[RI]] table = {{.*}} table_wise, rank = {{[01]}}> slots = [{{[0-7]}}]
// KAGGLE2-NEXT:     sparse.pack {{.*}} on_rank 0
// KAGGLE2-NEXT:     sparse.pack {{.*}} on_rank 1
// KAGGLE2-NEXT:     coll.all_to_all %{{[0-9]+}}, %{{[0-9]+}} on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}112, 112], [128, 128]]>
// KAGGLE2-NEXT:     sparse.unpack
// KAGGLE2-NEXT:     sparse.permute
// KAGGLE2-NEXT:     %[[DL:[0-9]+]], %[[DI:[0-9]+]], %{{[0-9]+}} = sparse.route {{.*}} {group = "emb_l/data_parallel"}
// KAGGLE2-NOT:      coll.
// KAGGLE2-COUNT-11: sparse.lookup %[[DL]], %[[DI]] table = {{.*}} data_parallel> slots
// KAGGLE2-NOT:      coll.
// KAGGLE2:          sched.yield %{{[0-9]+}}, %[[RL]], %[[RI]], %[[DL]], %[[DI]] :
// KAGGLE2-NEXT:     } backward {
// KAGGLE2-COUNT-11: sparse.lookup_grad
// KAGGLE2-NEXT:     coll.all_reduce %{{[0-9]+}}, {{.*}} on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "emb_l/data_parallel"}
// KAGGLE2-NOT:      coll.all_reduce
// KAGGLE2:          coll.all_to_all {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}112, 128], [112, 128]]> {group = "emb_l/table_wise"}
// KAGGLE2-NEXT:     sparse.unpack {{.*}} on_rank 0
// KAGGLE2-NEXT:     sparse.unpack {{.*}} on_rank 1
// KAGGLE2-COUNT-15: sparse.lookup_update %{{[0-9]+}}, %{{[0-9]+}} grad
// KAGGLE2-NEXT:     sched.dense @dense_pre

// `replicated-grads=with-dense` (the compiler's default lowering): the data-parallel group's
// all-reduce rides in the dense gradients' one (`with_dense_grads`); nothing else changes.
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p 'lift-sparse{replicated-grads=with-dense}' | filecheck %s --check-prefix=KAGGLE2-RIDE
// KAGGLE2-RIDE:          } backward {
// KAGGLE2-RIDE-COUNT-11: sparse.lookup_grad
// KAGGLE2-RIDE-NEXT:     coll.all_reduce %{{[0-9]+}}, {{.*}} role #coll.role<sparse_grad> reduce "sum" with_dense_grads {group = "emb_l/data_parallel"}
// KAGGLE2-RIDE-NOT:      coll.all_reduce
// KAGGLE2-RIDE-COUNT-11: sparse.lookup_update {{.*}} data_parallel>

// dlrm-kaggle, world size 1: one table-wise group on rank 0 and no collective at all (also
// when the replicated gradients would ride with the dense ones).
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws1.mlir -p lift-sparse | filecheck %s --check-prefix=KAGGLE1
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws1.mlir -p 'lift-sparse{replicated-grads=with-dense}' | filecheck %s --check-prefix=KAGGLE1
// KAGGLE1-NOT:      coll.
// KAGGLE1-NOT:      sparse.embedding_bag_collection
// KAGGLE1-LABEL:    sched.step @step world_size = 1
// KAGGLE1-NOT:      coll.
// KAGGLE1:          sparse.route {{.*}} world_size = 1 {group = "emb_l/table_wise"}
// KAGGLE1-COUNT-26: sparse.lookup {{.*}} table_wise, rank = 0>
// KAGGLE1-NOT:      sparse.lookup {{.*}} table =
// KAGGLE1-NOT:      coll.
// KAGGLE1:          } backward {
// KAGGLE1-COUNT-26: sparse.lookup_update {{.*}} table_wise, rank = 0>
// KAGGLE1-NOT:      sparse.lookup_update
// KAGGLE1-NOT:      coll.

// dlrm-kaggle, world size 3: the table-wise group spreads over 3 ranks (3x3 splits, 3 packs).
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws3.mlir -p lift-sparse | filecheck %s --check-prefix=KAGGLE3
// KAGGLE3-NOT:      sparse.embedding_bag_collection
// KAGGLE3-LABEL:    sched.step @step world_size = 3
// KAGGLE3:          coll.all_to_all {{.*}} on #coll.group<[0, 1, 2]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}5, 5, 5], [5, 5, 5], [5, 5, 5]]>
// KAGGLE3-NEXT:     coll.all_to_all {{.*}} role #coll.role<input_indices> send_splits(%{{[0-9]+}} : tensor<3xi64>)
// KAGGLE3-COUNT-15: sparse.lookup
// KAGGLE3-NEXT:     sparse.pack {{.*}} on_rank 0
// KAGGLE3-NEXT:     sparse.pack {{.*}} on_rank 1
// KAGGLE3-NEXT:     sparse.pack {{.*}} on_rank 2
// KAGGLE3-NEXT:     coll.all_to_all %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} on #coll.group<[0, 1, 2]> role #coll.role<output_pooled>
// KAGGLE3-COUNT-11: sparse.lookup {{.*}} data_parallel>
// KAGGLE3-NOT:      sparse.lookup {{.*}} table =
// KAGGLE3:          } backward {
// KAGGLE3:          coll.all_reduce {{.*}} on #coll.group<[0, 1, 2]> role #coll.role<sparse_grad>
// KAGGLE3-NOT:      coll.all_reduce
// KAGGLE3:          coll.all_to_all {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}80, 80, 80], [80, 80, 80], [80, 80, 80]]>
// KAGGLE3-COUNT-15: sparse.lookup_update %{{[0-9]+}}, %{{[0-9]+}} grad
// KAGGLE3-NOT:      sparse.lookup_update
// KAGGLE3-NOT:      sparse.embedding_bag_collection

// dlrm-kaggle, world size 2, --sharding row_wise: one row-wise group; partial pools are summed by
// a reduce_scatter, backward broadcasts the pooled gradients with one all-to-all.
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2-rowwise.mlir -p lift-sparse | filecheck %s --check-prefix=ROWWISE
// ROWWISE-NOT:      sparse.embedding_bag_collection
// ROWWISE-LABEL:    sched.step @step world_size = 2
// ROWWISE:          sparse.route {{.*}} world_size = 2 {group = "emb_l/row_wise"}
// ROWWISE-NEXT:     coll.all_to_all {{.*}} role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}26, 26], [26, 26]]>
// ROWWISE-NEXT:     coll.all_to_all {{.*}} role #coll.role<input_indices> send_splits
// ROWWISE-COUNT-26: sparse.lookup {{.*}} row_wise, ranks = [0, 1], row_bounds = [0, {{[0-9]+}}, {{[0-9]+}}]>
// ROWWISE-NEXT:     sparse.pack
// ROWWISE-NEXT:     coll.reduce_scatter {{.*}} on #coll.group<[0, 1]> role #coll.role<output_pooled> reduce "sum"
// ROWWISE-NOT:      coll.all_to_all
// ROWWISE:          } backward {
// ROWWISE:          coll.all_to_all {{.*}} role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}416, 416], [416, 416]]>
// ROWWISE-COUNT-26: sparse.lookup_update {{.*}} row_wise
// ROWWISE-NOT:      coll.

// dlrm-terabyte, world size 2 (rows-cap 20000): 26 tables, 8 data-parallel and 18 table-wise.
// RUN: sparselift-opt %S/../inputs/dlrm-terabyte-ws2.mlir -p lift-sparse | filecheck %s --check-prefix=TERABYTE
// TERABYTE-NOT:      sparse.embedding_bag_collection
// TERABYTE-LABEL:    sched.step @step world_size = 2
// TERABYTE:          coll.all_to_all {{.*}} role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}9, 9], [9, 9]]> {group = "emb_l/table_wise"}
// TERABYTE-NEXT:     coll.all_to_all {{.*}} role #coll.role<input_indices>
// TERABYTE-COUNT-18: sparse.lookup {{.*}} table_wise
// TERABYTE:          coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}} {group = "emb_l/table_wise"}
// TERABYTE-COUNT-8:  sparse.lookup {{.*}} data_parallel>
// TERABYTE-NOT:      sparse.lookup {{.*}} table =
// TERABYTE:          } backward {
// TERABYTE-COUNT-8:  sparse.lookup_update grad {{.*}} data_parallel>
// TERABYTE:          coll.all_to_all {{.*}} role #coll.role<grad_pooled> {{.*}} {group = "emb_l/table_wise"}
// TERABYTE-COUNT-18: sparse.lookup_update {{.*}} table_wise
// TERABYTE-NOT:      sparse.lookup_update
// TERABYTE-NOT:      sparse.embedding_bag_collection

// two-tower, world size 2: two embedding modules, three groups; the user group has a weighted
// feature (its weights travel with the indices) and mean-pooled tables.
// RUN: sparselift-opt %S/../inputs/two-tower-ws2.mlir -p lift-sparse | filecheck %s --check-prefix=TWOTOWER
// TWOTOWER-NOT:     sparse.embedding_bag_collection
// TWOTOWER-LABEL:   sched.step @step world_size = 2 outputs = 1 attributes {batch = "8", model = "TwoTower", table_params = {item.tag_weight = "item.tag_weight"}}
// TWOTOWER:         sparse.route {{.*}} weights({{.*}}) {{.*}} {group = "user/table_wise"}
// TWOTOWER-NEXT:    coll.all_to_all {{.*}} role #coll.role<input_lengths>
// TWOTOWER-NEXT:    coll.all_to_all {{.*}} role #coll.role<input_indices> send_splits(%[[US:[0-9]+]] : tensor<2xi64>)
// TWOTOWER-NEXT:    %[[UW:[0-9]+]], %{{[0-9]+}} = coll.all_to_all {{.*}} role #coll.role<input_weights> send_splits(%[[US]] : tensor<2xi64>)
// TWOTOWER:         sparse.lookup {{.*}} weights %[[UW]] : tensor<?xf32> table = #sparse.table<"user.emb.2"
// TWOTOWER:         coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}} {group = "user/table_wise"}
// TWOTOWER:         sparse.route {{.*}} {group = "item/table_wise"}
// TWOTOWER-NOT:     input_weights
// TWOTOWER:         coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}} {group = "item/table_wise"}
// TWOTOWER:         sparse.route {{.*}} {group = "item/data_parallel"}
// TWOTOWER:         } backward {
// TWOTOWER:         coll.all_reduce {{.*}} role #coll.role<sparse_grad> {{.*}} {group = "item/data_parallel"}
// TWOTOWER:         coll.all_to_all {{.*}} role #coll.role<grad_pooled> {{.*}} {group = "item/table_wise"}
// TWOTOWER:         coll.all_to_all {{.*}} role #coll.role<grad_pooled> {{.*}} {group = "user/table_wise"}
// TWOTOWER:         sparse.lookup_update {{.*}} weights %{{[0-9]+}} : tensor<?xf32> grad {{.*}} table = #sparse.table<"user.emb.2"
// RUN: sparselift-opt %S/../inputs/two-tower-ws2.mlir -p lift-sparse | filecheck %s --check-prefix=TWOTOWER-TOTAL
// TWOTOWER-TOTAL-COUNT-6: sparse.lookup {{.*}} table =
// TWOTOWER-TOTAL-NOT:     sparse.lookup {{.*}} table =
// TWOTOWER-TOTAL:         } backward {
// TWOTOWER-TOTAL-COUNT-6: sparse.lookup_update
// TWOTOWER-TOTAL-NOT:     sparse.lookup_update

// torchrec-ebc, world size 2: two EBC modules (one weighted), all tables tiny, so data-parallel:
// no all-to-all, one aggregated all_reduce per group.
// RUN: sparselift-opt %S/../inputs/torchrec-ebc-ws2.mlir -p lift-sparse | filecheck %s --check-prefix=TORCHREC
// TORCHREC-NOT:     sparse.embedding_bag_collection
// TORCHREC-NOT:     coll.all_to_all
// TORCHREC-LABEL:   sched.step @step world_size = 2 outputs = 1 attributes {batch = "8", model = "TorchRecEBCModel"}
// TORCHREC-NOT:     coll.
// TORCHREC-COUNT-3: sparse.lookup {{.*}} {group = "ebc/data_parallel"}
// TORCHREC:         sparse.route {{.*}} weights({{.*}}) {{.*}} {group = "weighted_ebc/data_parallel"}
// TORCHREC-NEXT:    sparse.lookup {{.*}} weights {{.*}} {group = "weighted_ebc/data_parallel"}
// TORCHREC-NOT:     coll.
// TORCHREC:         } backward {
// TORCHREC:         sparse.lookup_grad {{.*}} weights
// TORCHREC-NEXT:    coll.all_reduce {{.*}} role #coll.role<sparse_grad> {{.*}} {group = "weighted_ebc/data_parallel"}
// TORCHREC-NEXT:    sparse.lookup_update grad
// TORCHREC:         coll.all_reduce %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} on {{.*}} role #coll.role<sparse_grad> {{.*}} {group = "ebc/data_parallel"}
// TORCHREC-NOT:     coll.all_reduce
// TORCHREC-NOT:     coll.all_to_all
// TORCHREC-NOT:     sparse.embedding_bag_collection
