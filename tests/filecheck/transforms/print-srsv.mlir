// RUN: sparselift-opt %s --split-input-file --verify-diagnostics -p lift-sparse,print-srsv | filecheck %s

// Two ranks, batch 4: "t0" (dim 8) on rank 0 serves f0 (pooling factor 2), "t1" (dim 16) on
// rank 1 serves f1 (pooling factor 3). Per owner: t0 gathers 4 x 2 x 2 = 16 rows of 32 B, t1
// 4 x 2 x 3 = 24 rows of 64 B. Rank 0 receives 4 x 2 = 8 ids (64 B) from every rank, rank 1
// 12 ids (96 B); pooled vectors: 8 x 4 x 4 = 128 B from rank 0, 16 x 4 x 4 = 256 B from rank 1.
// CHECK-LABEL: SRSV @two_tables: world_size = 2, batch = 4
// CHECK-NEXT:  tables (2; per owner rank and step)
// CHECK-NEXT:  table group placement owners rows dim dtype pool features pf lookups gathered_B table_B workspace_B
// CHECK-NEXT:  t0 emb/table_wise table_wise 0 100 8 f32 sum f0 2 16 512 3200 256
// CHECK-NEXT:  t1 emb/table_wise table_wise 1 50 16 f32 sum f1 3 24 1536 3200 512
// CHECK-NEXT:  collectives (4;
// CHECK-NEXT:  # phase op role group ranks dtype sizing total_B bytes_per_peer
// CHECK-NEXT:  0 forward coll.all_to_all input_lengths emb/table_wise 0,1 i32 static 32 s0->[16, 16] s1->[16, 16]
// CHECK-NEXT:  1 forward coll.all_to_all input_indices emb/table_wise 0,1 i64 estimated 160 s0->[64, 96] s1->[64, 96]
// CHECK-NEXT:  2 forward coll.all_to_all output_pooled emb/table_wise 0,1 f32 static 384 s0->[128, 128] s1->[256, 256]
// CHECK-NEXT:  3 backward coll.all_to_all grad_pooled emb/table_wise 0,1 f32 static 384 s0->[128, 256] s1->[128, 256]
// CHECK-NEXT:  builtin.module {
// CHECK-NEXT:    sched.step @two_tables
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

// Row-wise over two ranks (rows [0, 600) and [600, 1000)): every shard gets half of the ids
// (4 x 2 x 4 / 2 = 16 per shard) and the partial pools are reduce-scattered (4 x 8 x 4 = 128 B
// per peer).
// CHECK-LABEL: SRSV @row_wise: world_size = 2, batch = 4
// CHECK:       big emb/row_wise row_wise 0,1 1000 8 f32 sum f 4 16 512 19200/12800 256
// CHECK:       1 forward coll.all_to_all input_indices emb/row_wise 0,1 i64 estimated 128 s0->[64, 64] s1->[64, 64]
// CHECK-NEXT:  2 forward coll.reduce_scatter output_pooled emb/row_wise 0,1 f32 static 256 s0->[128, 128] s1->[128, 128]
// CHECK-NEXT:  3 backward coll.all_to_all grad_pooled emb/row_wise 0,1 f32 static 256 s0->[128, 128] s1->[128, 128]
sched.step @row_wise world_size = 2 outputs = 1 attributes {batch = "4"} {
^bb0(%ids: tensor<?xi64>, %off: tensor<?xi64>):
  %p = sparse.embedding_bag_collection "emb" ids(%ids : tensor<?xi64>) offsets(%off : tensor<?xi64>) tables = [#sparse.table<"big", rows = 1000, dim = 8, f32, sum>] features = [#sparse.feature<"f" -> "big", pooling_factor = 4.0>] placements = [#sparse.placement<"big", row_wise, ranks = [0, 1], row_bounds = [0, 600, 1000]>] {group = "emb/row_wise"} -> tensor<?x8xf32>
  %out = sched.dense @top(%p) phase "forward" : (tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %gp = sched.dense @top(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x8xf32>
  sched.yield
}

// -----

// A replicated table: local lookups (B x pf = 16 ids), then a ring all-reduce of its
// 1000 x 8 x 4 = 32000 B gradient.
// CHECK-LABEL: SRSV @replicated: world_size = 2, batch = 4
// CHECK:       big emb/dp data_parallel 0,1 1000 8 f32 sum f 4 16 512 32000 128
// CHECK:       collectives (1;
// CHECK:       0 backward coll.all_reduce sparse_grad emb/dp 0,1 f32 static 64000 s0->[0, 32000] s1->[32000, 0]
sched.step @replicated world_size = 2 outputs = 1 attributes {batch = "4"} {
^bb0(%ids: tensor<?xi64>, %off: tensor<?xi64>):
  %p = sparse.embedding_bag_collection "emb" ids(%ids : tensor<?xi64>) offsets(%off : tensor<?xi64>) tables = [#sparse.table<"big", rows = 1000, dim = 8, f32, sum>] features = [#sparse.feature<"f" -> "big", pooling_factor = 4.0>] placements = [#sparse.placement<"big", data_parallel>] {group = "emb/dp"} -> tensor<?x8xf32>
  %out = sched.dense @top(%p) phase "forward" : (tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %gp = sched.dense @top(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x8xf32>
  sched.yield
}

// -----

// World size 1: everything is local, no collective at all.
// CHECK-LABEL: SRSV @single: world_size = 1, batch = 8
// CHECK:       t emb/table_wise table_wise 0 10 4 f32 sum f 2 16 256 160 128
// CHECK-NEXT:  collectives (0;
// CHECK-NEXT:  # phase op role group ranks dtype sizing total_B bytes_per_peer
// CHECK-NEXT:  builtin.module {
// CHECK-NOT:   coll.
// CHECK:       sched.step @single
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

// Without a batch the sizes are unknown: a clear error.
// CHECK: print-srsv: sched.step @no_batch has no integer 'batch' attribute: pass the local batch explicitly
sched.step @no_batch world_size = 1 outputs = 1 {
^bb0(%ids: tensor<?xi64>, %off: tensor<?xi64>):
  %p = sparse.embedding_bag_collection "emb" ids(%ids : tensor<?xi64>) offsets(%off : tensor<?xi64>) tables = [#sparse.table<"t", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f" -> "t", pooling_factor = 2.0>] placements = [#sparse.placement<"t", table_wise, rank = 0>] -> tensor<?x4xf32>
  %out = sched.dense @top(%p) phase "forward" : (tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %gp = sched.dense @top(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x4xf32>
  sched.yield
}
