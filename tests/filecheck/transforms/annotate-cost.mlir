// RUN: sparselift-opt %s --split-input-file -p lift-sparse,annotate-cost | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,annotate-cost{profile=h100-nccl}' | filecheck %s --check-prefix=H100
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,generate-kernels,annotate-cost' | filecheck %s --check-prefix=GEN
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,annotate-cost{profile=cpu-shm}' | filecheck %s --check-prefix=SHM
// RUN: echo '{"name": "slow-net", "net_bw_gbps": 0.001}' > %t.json
// RUN: sparselift-opt %s --split-input-file -p 'lift-sparse,annotate-cost{profile="%t.json"}' | filecheck %s --check-prefix=JSON
// RUN: sparselift-opt %s --split-input-file --verify-diagnostics -p 'lift-sparse,annotate-cost{profile=tpu-v9}' | filecheck %s --check-prefix=BAD

// Two ranks, batch 4: "t0" (dim 8) on rank 0 serves f0 (pooling factor 2), "t1" (dim 16) on
// rank 1 serves f1 (pooling factor 3).
// cpu-gloo: the t0 lookup gathers 4 x 2 x 2 = 16 rows of 32 B: 5 us launch + 15 us lookup
// overhead + 512 B / 6 GB/s = 20.085 us, plus the reference lowering's torch passes: 85 us +
// 16 ids x 115 ns + 512 B x 0.77 ns = 87.234 us (107.32 us in all). The pooled all-to-all: rank 1 sends 16 x 4 x 4 = 256 B
// to rank 0: 50 us + 20 us per peer + 256 B / 3 GB/s = 70.085 us. The step total is the critical
// path: route, the lengths and indices exchanges, the t1 lookup, its pack, the pooled exchange,
// unpack, (dense regions without flops: 0), the gradient pack, exchange, the t1 unpack and update.
// CHECK-LABEL: sched.step @two_tables
// CHECK-SAME:    cost = #sched.cost<bytes = 9488, lookups = 80, est_us = 748.898>
// CHECK:         sparse.route {{.*}}cost = #sched.cost<bytes = 416, lookups = 0, est_us = 5.023>
// CHECK:         coll.all_to_all {{.*}}role #coll.role<input_lengths> {{.*}}cost = #sched.cost<bytes = 16, lookups = 0, est_us = 70.005>
// CHECK:         coll.all_to_all {{.*}}role #coll.role<input_indices> {{.*}}cost = #sched.cost<bytes = 96, lookups = 0, est_us = 70.032>
// CHECK:         sparse.lookup {{.*}}"t0"{{.*}}cost = #sched.cost<bytes = 512, lookups = 16, est_us = 107.32>
// CHECK:         sparse.lookup {{.*}}"t1"{{.*}}cost = #sched.cost<bytes = 1536, lookups = 24, est_us = 109.199>
// CHECK:         coll.all_to_all {{.*}}role #coll.role<output_pooled> {{.*}}cost = #sched.cost<bytes = 256, lookups = 0, est_us = 70.085>
// CHECK:         sparse.permute {{.*}}cost = #sched.cost<bytes = 0, lookups = 0, est_us = 0.0>
// CHECK:         sched.dense @top{{.*}}cost = #sched.cost<bytes = 0, lookups = 0, est_us = 0.0>
// CHECK:         sched.yield {{.*}}cost = #sched.cost<bytes = 0, lookups = 0, est_us = 0.0>
// CHECK:       } backward {
// CHECK:         sparse.lookup_update {{.*}}"t0"{{.*}}cost = #sched.cost<bytes = 1024, lookups = 16, est_us = 107.413>
// CHECK:         sparse.lookup_update {{.*}}"t1"{{.*}}cost = #sched.cost<bytes = 3072, lookups = 24, est_us = 109.48>

// After generate-kernels the step runs generated kernels (`kernels = "generated"`): a table op
// left unfused (one table per rank, under min-tables) is one kernel call, without the
// reference lowering's torch passes: 20.085 us again.
// GEN-LABEL: sched.step @two_tables
// GEN-SAME:    kernels = "generated"
// GEN:         sparse.lookup {{.*}}"t0"{{.*}}cost = #sched.cost<bytes = 512, lookups = 16, est_us = 20.085>
// GEN:         sparse.lookup_update {{.*}}"t0"{{.*}}cost = #sched.cost<bytes = 1024, lookups = 16, est_us = 20.179>

// h100-nccl: the t0 lookup is 5 us + 8 us + 512 B / 1.5 TB/s = 13.0 us; the pooled exchange
// 15 us + 1 us per peer + 256 B / 350 GB/s = 16.001 us.
// H100-LABEL: sched.step @two_tables
// H100-SAME:    cost = #sched.cost<bytes = 9488, lookups = 80, est_us = 151.006>
// H100:         sparse.lookup {{.*}}"t0"{{.*}}cost = #sched.cost<bytes = 512, lookups = 16, est_us = 13.0>
// H100:         coll.all_to_all {{.*}}role #coll.role<output_pooled> {{.*}}cost = #sched.cost<bytes = 256, lookups = 0, est_us = 16.001>

// cpu-shm (the all-to-alls through shared memory): the same lookups as cpu-gloo; the pooled
// exchange is 25 us + 10 us per peer + 256 B / 5.5 GB/s = 35.047 us.
// SHM-LABEL: sched.step @two_tables
// SHM:         sparse.lookup {{.*}}"t0"{{.*}}cost = #sched.cost<bytes = 512, lookups = 16, est_us = 107.32>
// SHM:         coll.all_to_all {{.*}}role #coll.role<output_pooled> {{.*}}cost = #sched.cost<bytes = 256, lookups = 0, est_us = 35.047>

// A JSON profile (fields not given come from cpu-gloo) with a 1 MB/s network: the pooled
// exchange is 50 + 20 + 256 us.
// JSON-LABEL: sched.step @two_tables
// JSON:         coll.all_to_all {{.*}}role #coll.role<output_pooled> {{.*}}cost = #sched.cost<bytes = 256, lookups = 0, est_us = 326.0>

// BAD: annotate-cost: unknown hardware profile 'tpu-v9': not a built-in (cpu-gloo, cpu-shm, h100-nccl, h200-nccl) and not a JSON file
sched.step @two_tables world_size = 2 outputs = 1 attributes {batch = "4"} {
^bb0(%ids0: tensor<?xi64>, %off0: tensor<?xi64>, %ids1: tensor<?xi64>, %off1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%off0, %off1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 16, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 2.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 3.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] {group = "emb/table_wise"} -> tensor<?x8xf32>, tensor<?x16xf32>
  %out = sched.dense @top(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x16xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @top(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x16xf32>)
  sched.yield
}

// -----

// World size 1: no collective; 8 bags x 2 ids of 16 B rows per lookup (5 + 15 + 256 B / 6 GB/s
// = 20.043 us, + 87.037 us of reference torch passes). The total is the whole chain: route, lookup, update (one rank exchanges nothing,
// so lift-sparse leaves no pack or unpack).
// CHECK-LABEL: sched.step @single
// CHECK-SAME:    cost = #sched.cost<bytes = 1120, lookups = 32, est_us = 219.227>
// CHECK-NOT:     coll.
// CHECK:         sparse.lookup {{.*}}cost = #sched.cost<bytes = 256, lookups = 16, est_us = 107.08>
// CHECK-NOT:     coll.
// CHECK:         sparse.lookup_update {{.*}}cost = #sched.cost<bytes = 512, lookups = 16, est_us = 107.127>
// CHECK-NOT:     coll.
// GEN-LABEL: sched.step @single
// GEN:         sparse.lookup {{.*}}cost = #sched.cost<bytes = 256, lookups = 16, est_us = 20.043>
// H100-LABEL: sched.step @single
// H100-NOT:     coll.
// JSON-LABEL: sched.step @single
// BAD: annotate-cost: unknown hardware profile 'tpu-v9'
sched.step @single world_size = 1 outputs = 1 attributes {batch = "8"} {
^bb0(%ids: tensor<?xi64>, %off: tensor<?xi64>):
  %p = sparse.embedding_bag_collection "emb" ids(%ids : tensor<?xi64>) offsets(%off : tensor<?xi64>) tables = [#sparse.table<"t", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f" -> "t", pooling_factor = 2.0>] placements = [#sparse.placement<"t", table_wise, rank = 0>] {group = "emb/table_wise"} -> tensor<?x4xf32>
  %out = sched.dense @top(%p) phase "forward" : (tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %gp = sched.dense @top(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x4xf32>
  sched.yield
}

// -----

// A dense region with a `flops` attribute: 4.5 MFLOP at 45 GFLOP/s = 100 us (forward) and
// 9 MFLOP (backward) = 200 us, both on the critical path: 219.227 + 300 us.
// CHECK-LABEL: sched.step @flops
// CHECK-SAME:    est_us = 519.227
// CHECK:         sched.dense @top{{.*}} {flops = 4500000 : i64, cost = #sched.cost<bytes = 0, lookups = 0, est_us = 100.0>}
// CHECK:         sched.dense @top{{.*}} {flops = "9000000", cost = #sched.cost<bytes = 0, lookups = 0, est_us = 200.0>}
// GEN-LABEL: sched.step @flops
// H100-LABEL: sched.step @flops
// JSON-LABEL: sched.step @flops
// BAD: annotate-cost: unknown hardware profile 'tpu-v9'
sched.step @flops world_size = 1 outputs = 1 attributes {batch = "8"} {
^bb0(%ids: tensor<?xi64>, %off: tensor<?xi64>):
  %p = sparse.embedding_bag_collection "emb" ids(%ids : tensor<?xi64>) offsets(%off : tensor<?xi64>) tables = [#sparse.table<"t", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f" -> "t", pooling_factor = 2.0>] placements = [#sparse.placement<"t", table_wise, rank = 0>] {group = "emb/table_wise"} -> tensor<?x4xf32>
  %out = sched.dense @top(%p) phase "forward" {flops = 4500000 : i64} : (tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %gp = sched.dense @top(%g) phase "backward" {flops = "9000000"} : (tensor<?xf32>) -> tensor<?x4xf32>
  sched.yield
}
