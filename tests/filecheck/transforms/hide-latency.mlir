// RUN: sparselift-opt %s --split-input-file -p lift-sparse,hide-latency | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,hide-latency{overlap=output}' | filecheck %s --check-prefix=OUTPUT
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,hide-latency{forward=false dense-grads=false}' | filecheck %s --check-prefix=NOFWD
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,hide-latency{backward=false}' | filecheck %s --check-prefix=NOBWD
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,hide-latency{max-inflight-bytes=1000}' | filecheck %s --check-prefix=CAP
// RUN: not sparselift-opt %s --split-input-file -p 'lift-sparse,hide-latency{overlap=sideways}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p lift-sparse,aggregate-comm,generate-kernels,hide-latency | filecheck %s --check-prefix=KAGGLE

// A table-wise group, a data-parallel table and a bottom MLP (@dense_pre) independent of both.
// Forward: the input exchanges start as soon as the ids are routed, and the bottom MLP and the
// local lookups run before their waits. The output exchange has nothing left to overlap.
// Backward: the sparse-gradient all-reduce and the pooled-gradient exchange start before the
// bottom MLP's backward and are waited on after it.
// CHECK-LABEL: sched.step @hide
// CHECK-SAME:    dense_grad_overlap
// CHECK:         sched.dense @sparse_inputs
// CHECK-NEXT:    sparse.route
// CHECK-NEXT:    %[[L:.*]] = coll.all_to_all_start {{.*}} role #coll.role<input_lengths>
// CHECK-NEXT:    %[[I:.*]] = coll.all_to_all_start {{.*}} role #coll.role<input_indices>
// CHECK-NEXT:    sched.dense @dense_pre
// CHECK-NEXT:    sparse.route {{.*}}data_parallel
// CHECK-NEXT:    sparse.lookup {{.*}}"t2"
// CHECK:         coll.wait %[[L]]
// CHECK-NEXT:    coll.wait %[[I]]
// CHECK-NEXT:    sparse.lookup {{.*}}"t0"
// CHECK:         coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}}remark = #sched.remark<"hide-latency", "no-overlap", "nothing independent to overlap: the first use follows the exchange">
// CHECK:       } backward {
// CHECK:         sched.dense @dense_post
// CHECK:         %[[R:.*]] = coll.all_reduce_start {{.*}} role #coll.role<sparse_grad>
// CHECK:         %[[G:.*]] = coll.all_to_all_start {{.*}} role #coll.role<grad_pooled>
// CHECK-NEXT:    sched.dense @dense_pre
// CHECK-NEXT:    coll.wait %[[R]]
// CHECK:         coll.wait %[[G]]
// CHECK-NOT:     coll.all_to_all

// overlap=output: the lookups and the output exchange go first; the bottom MLP runs while the
// pooled vectors travel. The input exchanges stay asynchronous (TrainPipeline starts them a
// step ahead).
// OUTPUT-LABEL: sched.step @hide
// OUTPUT:         coll.all_to_all_start {{.*}} role #coll.role<input_lengths>
// OUTPUT:         coll.wait
// OUTPUT:         sparse.lookup {{.*}}"t0"
// OUTPUT:         %[[O:.*]] = coll.all_to_all_start {{.*}} role #coll.role<output_pooled>
// OUTPUT-NEXT:    sparse.route {{.*}}data_parallel
// OUTPUT:         sched.dense @dense_pre
// OUTPUT-NEXT:    coll.wait %[[O]]

// forward=false dense-grads=false: the forward keeps its synchronous exchanges in place, and
// the step is not marked for dense-gradient overlap.
// NOFWD-LABEL: sched.step @hide
// NOFWD-NOT:     dense_grad_overlap
// NOFWD:         sched.dense @dense_pre
// NOFWD-NEXT:    sparse.route
// NOFWD-NEXT:    coll.all_to_all {{.*}}input_lengths
// NOFWD:       } backward {
// NOFWD:         coll.all_to_all_start {{.*}}grad_pooled

// backward=false: only the forward changes.
// NOBWD-LABEL: sched.step @hide
// NOBWD-NOT:     dense_grad_overlap
// NOBWD:         coll.all_to_all_start {{.*}}input_lengths
// NOBWD:       } backward {
// NOBWD-NOT:     _start
// NOBWD:         coll.all_reduce {{.*}}sparse_grad
// NOBWD:         coll.all_to_all {{.*}}grad_pooled

// max-inflight-bytes: with 1000 bytes the lengths exchange (512 bytes at batch 64) fits; the
// indices exchange and the pooled exchanges would not, so they stay synchronous, each with the
// reason. (The sparse-gradient all-reduce, 320 bytes, fits once the larger one is out.)
// CAP-LABEL: sched.step @hide
// CAP:         coll.all_to_all_start {{.*}}input_lengths
// CAP:         coll.all_to_all {{.*}}input_indices{{.*}}remark = #sched.remark<"hide-latency", "in-flight-memory", "in-flight bytes 2048 would exceed max-inflight-bytes 1000; this exchange (1536 bytes) stays synchronous">
// CAP:         coll.all_to_all {{.*}}output_pooled{{.*}}remark = #sched.remark<"hide-latency", "in-flight-memory", "in-flight bytes 3072 would exceed max-inflight-bytes 1000
// CAP:       } backward {
// CAP:         coll.all_reduce_start {{.*}}sparse_grad
// CAP:         coll.all_to_all {{.*}}grad_pooled{{.*}}remark = #sched.remark<"hide-latency", "in-flight-memory", "in-flight bytes 3392 would exceed max-inflight-bytes 1000

// BADOPT: hide-latency: overlap must be 'input' or 'output', got 'sideways'

// On the exported DLRM (Kaggle) with aggregation and generated kernels: the one packed input
// exchange starts before the bottom MLP; the data-parallel tables' fused lookup runs meanwhile.
// KAGGLE-LABEL: sched.step @step
// KAGGLE-SAME:    dense_grad_overlap
// KAGGLE:         sparse.pack_ids
// KAGGLE-NEXT:    coll.all_to_all_start {{.*}}input_packed
// KAGGLE-NEXT:    sched.dense @dense_pre
// KAGGLE:         sparse.fused_lookup {{.*}} {group = "emb_l/data_parallel"}
// KAGGLE:         coll.wait
// The replicated tables' gradients ride in the dense gradients' all-reduce (aggregate-comm's
// dense_grad role): no start of their own.
// KAGGLE:       } backward {
// KAGGLE-NOT:     coll.all_reduce_start
// KAGGLE:         coll.all_reduce {{.*}} with_dense_grads {{.*}}#sched.remark<"hide-latency", "with-dense-grads", "rides in the dense gradients' all-reduce: no start of its own">
// KAGGLE:         coll.all_to_all_start {{.*}}grad_pooled
// KAGGLE:         sched.dense @dense_pre

sched.step @hide world_size = 2 outputs = 1 attributes {batch = "64"} {
^bb0(%x: tensor<?x4xf32>, %i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>, %i2: tensor<?xi64>, %o2: tensor<?xi64>):
  %a, %b, %c, %d, %e, %f = sched.dense @sparse_inputs(%i0, %o0, %i1, %o1, %i2, %o2) phase "forward" : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
  %h = sched.dense @dense_pre(%x) phase "forward" : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%a, %c : tensor<?xi64>, tensor<?xi64>) offsets(%b, %d : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, mean>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 2.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %p2 = sparse.embedding_bag_collection "small" ids(%e : tensor<?xi64>) offsets(%f : tensor<?xi64>) tables = [#sparse.table<"t2", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f2" -> "t2", pooling_factor = 1.0>] placements = [#sparse.placement<"t2", data_parallel>] {group = "small/data_parallel"} -> tensor<?x4xf32>
  %out = sched.dense @dense_post(%h, %p0, %p1, %p2) phase "forward" : (tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x1xf32>
  sched.yield %out : tensor<?x1xf32>
} backward {
^bb0(%g: tensor<?x1xf32>):
  %gh, %g0, %g1, %g2 = sched.dense @dense_post(%g) phase "backward" : (tensor<?x1xf32>) -> (tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>)
  %gx = sched.dense @dense_pre(%gh) phase "backward" : (tensor<?x4xf32>) -> tensor<?x4xf32>
  sched.yield
}

// -----

// World size 1: nothing travels, nothing to hide (lift-sparse emits no collective at all).
// CHECK-LABEL: sched.step @single
// CHECK-NOT:     coll.
// CHECK-NOT:     dense_grad_overlap
sched.step @single world_size = 1 outputs = 1 attributes {batch = "64"} {
^bb0(%x: tensor<?x4xf32>, %i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>, %i2: tensor<?xi64>, %o2: tensor<?xi64>):
  %a, %b, %c, %d, %e, %f = sched.dense @sparse_inputs(%i0, %o0, %i1, %o1, %i2, %o2) phase "forward" : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
  %h = sched.dense @dense_pre(%x) phase "forward" : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%a, %c : tensor<?xi64>, tensor<?xi64>) offsets(%b, %d : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, mean>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 2.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x4xf32>
  %p2 = sparse.embedding_bag_collection "small" ids(%e : tensor<?xi64>) offsets(%f : tensor<?xi64>) tables = [#sparse.table<"t2", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f2" -> "t2", pooling_factor = 1.0>] placements = [#sparse.placement<"t2", data_parallel>] {group = "small/data_parallel"} -> tensor<?x4xf32>
  %out = sched.dense @dense_post(%h, %p0, %p1, %p2) phase "forward" : (tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x1xf32>
  sched.yield %out : tensor<?x1xf32>
} backward {
^bb0(%g: tensor<?x1xf32>):
  %gh, %g0, %g1, %g2 = sched.dense @dense_post(%g) phase "backward" : (tensor<?x1xf32>) -> (tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>)
  %gx = sched.dense @dense_pre(%gh) phase "backward" : (tensor<?x4xf32>) -> tensor<?x4xf32>
  sched.yield
}
