// RUN: sparselift-opt %s --split-input-file --verify-diagnostics -p lift-sparse | filecheck %s
// RUN: sed -n '/^sched.step @row_wise_partial_ranks /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=ROW-WISE-PARTIAL-RANKS
// RUN: sed -n '/^sched.step @row_wise_mean /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=ROW-WISE-MEAN
// RUN: sed -n '/^sched.step @mixed_kinds /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=MIXED-KINDS
// RUN: sed -n '/^sched.step @mixed_dtypes /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=MIXED-DTYPES
// RUN: sed -n '/^sched.step @two_uses /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=TWO-USES
// RUN: sed -n '/^sched.step @unused /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=UNUSED
// RUN: sed -n '/^sched.step @read_by_saved_value /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=READ-BY-SAVED-VALUE
// RUN: sed -n '/^sched.step @read_by_other_op /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=READ-BY-OTHER-OP
// RUN: sed -n '/^sched.step @no_adjoint /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=NO-ADJOINT
// RUN: sed -n '/^sched.step @opaque_left /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=OPAQUE-LEFT
// RUN: sed -n '/^sched.step @table_twice /,/^}$/p' %s | not sparselift-opt -p lift-sparse 2>&1 | filecheck %s --check-prefix=TABLE-TWICE
// RUN: not sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse{optimizer=rmsprop}' 2>&1 | filecheck %s --check-prefix=BAD-OPTIMIZER
// RUN: not sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse{lr=0.5}' 2>&1 | filecheck %s --check-prefix=BAD-LR
// RUN: not sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse{table-optimizers="user.emb.0=adam:x"}' 2>&1 | filecheck %s --check-prefix=BAD-ENTRY
// RUN: not sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse{table-optimizers="nope=adam"}' 2>&1 | filecheck %s --check-prefix=BAD-TABLE
// RUN: not sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse{replicated-grads=twice}' 2>&1 | filecheck %s --check-prefix=BAD-REPLICATED-GRADS
// Bad pass options are rejected before any step is touched:
// BAD-OPTIMIZER: sparselift-opt: error: lift-sparse: unknown optimizer 'rmsprop'; expected one of sgd, adagrad, rowwise_adagrad, adam, adamw, partial_rowwise_adam
// A learning rate is a run-time value (sparse_optimizer.param_groups), no pass option:
// BAD-LR: sparselift-opt: error: pass 'lift-sparse' has no option 'lr'; its options: optimizer, table-optimizers,
// BAD-ENTRY: sparselift-opt: error: lift-sparse: table-optimizers entry 'user.emb.0=adam:x' is not TABLE=KIND or TABLE=KIND:GROUP
// BAD-TABLE: sparselift-opt: error: lift-sparse: table-optimizers names no table nope
// BAD-REPLICATED-GRADS: sparselift-opt: error: lift-sparse: replicated-grads must be 'own' or 'with-dense', got 'twice'

// lift-sparse rejects what it cannot lift with a PassFailedException naming the module, table
// or feature. The first RUN checks every message (one per case); the others run each
// case alone (sed cuts it out) and check that sparselift-opt exits non-zero with that message.

// A row-wise table must be sharded over every rank of the step.
// CHECK: lift-sparse: row_wise table 't0' of module 'emb' must span all 3 ranks (it spans [0, 1])
// ROW-WISE-PARTIAL-RANKS: sparselift-opt: error: lift-sparse: row_wise table 't0' of module 'emb' must span all 3 ranks (it spans [0, 1])
sched.step @row_wise_partial_ranks world_size = 3 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>] -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0) phase "forward" : (tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x8xf32>
  sched.yield
}

// -----

// Row-wise partial pools of a mean are not exact.
// CHECK: lift-sparse: row_wise table 't0' of module 'emb' uses mean pooling, which row-wise partial pools cannot express yet; place it table_wise
// ROW-WISE-MEAN: sparselift-opt: error: lift-sparse: row_wise table 't0' of module 'emb' uses mean pooling, which row-wise partial pools cannot express yet; place it table_wise
sched.step @row_wise_mean world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, mean>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>] -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0) phase "forward" : (tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x8xf32>
  sched.yield
}

// -----

// One group has one placement kind.
// CHECK: lift-sparse: module 'emb' mixes placement kinds ['data_parallel', 'table_wise'] in one group
// MIXED-KINDS: sparselift-opt: error: lift-sparse: module 'emb' mixes placement kinds ['data_parallel', 'table_wise'] in one group
sched.step @mixed_kinds world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", data_parallel>] -> tensor<?x8xf32>, tensor<?x4xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>)
  sched.yield
}

// -----

// One group has one table dtype (its buffers have one element type).
// CHECK: lift-sparse: module 'emb' mixes table dtypes in one group
// MIXED-DTYPES: sparselift-opt: error: lift-sparse: module 'emb' mixes table dtypes in one group
sched.step @mixed_dtypes world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0, %p1 = sparse.embedding_bag_collection "emb" ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%offs0, %offs1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>, #sparse.table<"t1", rows = 50, dim = 4, f16, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] -> tensor<?x8xf32>, tensor<?x4xf16>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x4xf16>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x4xf16>)
  sched.yield
}

// -----

// A pooled output read twice (a dense region and a model output) has no single gradient.
// CHECK: lift-sparse: feature 'f0' of module 'emb': its pooled output has 2 uses; exactly one dense region or output may read it
// TWO-USES: sparselift-opt: error: lift-sparse: feature 'f0' of module 'emb': its pooled output has 2 uses; exactly one dense region or output may read it
sched.step @two_uses world_size = 2 outputs = 2 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>] -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0) phase "forward" : (tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out, %p0 : tensor<?xf32>, tensor<?x8xf32>
} backward {
^bb0(%g: tensor<?xf32>, %gp: tensor<?x8xf32>):
  %g0 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x8xf32>
  sched.yield
}

// -----

// A pooled output nobody reads has no gradient either.
// CHECK: lift-sparse: feature 'f0' of module 'emb': its pooled output has 0 uses; exactly one dense region or output may read it
// UNUSED: sparselift-opt: error: lift-sparse: feature 'f0' of module 'emb': its pooled output has 0 uses; exactly one dense region or output may read it
sched.step @unused world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %x: tensor<?xf32>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x8xf32>
  sched.yield %x : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  sched.yield
}

// -----

// A pooled output yielded as a saved value (past the step's outputs) is not a model output.
// CHECK: lift-sparse: feature 'f0' of module 'emb': it is read by sched.yield, not by a dense region
// READ-BY-SAVED-VALUE: sparselift-opt: error: lift-sparse: feature 'f0' of module 'emb': it is read by sched.yield, not by a dense region
sched.step @read_by_saved_value world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %x: tensor<?xf32>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x8xf32>
  sched.yield %x, %p0 : tensor<?xf32>, tensor<?x8xf32>
} backward {
^bb0(%g: tensor<?xf32>, %saved: tensor<?x8xf32>):
  sched.yield
}

// -----

// A pooled output read by an op that is neither a dense region nor the yield.
// CHECK: lift-sparse: feature 'f0' of module 'emb': it is read by sparse.pack, not by a dense region
// READ-BY-OTHER-OP: sparselift-opt: error: lift-sparse: feature 'f0' of module 'emb': it is read by sparse.pack, not by a dense region
sched.step @read_by_other_op world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x8xf32>
  %b = sparse.pack %p0 layout = #sparse.layout<[[0 : 8]]> : tensor<?x8xf32> -> tensor<?xf32>
  sched.yield %b : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  sched.yield
}

// -----

// The dense region reading a pooled output needs its backward adjoint.
// CHECK: lift-sparse: feature 'f0' of module 'emb': dense region @dense_post has no backward adjoint
// NO-ADJOINT: sparselift-opt: error: lift-sparse: feature 'f0' of module 'emb': dense region @dense_post has no backward adjoint
sched.step @no_adjoint world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0) phase "forward" : (tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  sched.yield
}

// -----

// Only forward EBCs are lifted; the final check finds one left in backward.
// CHECK: lift-sparse: an opaque sparse.embedding_bag_collection ('emb') is left in @opaque_left
// OPAQUE-LEFT: sparselift-opt: error: lift-sparse: an opaque sparse.embedding_bag_collection ('emb') is left in @opaque_left
sched.step @opaque_left world_size = 2 outputs = 1 {
^bb0(%x: tensor<?xf32>, %ids0: tensor<?xi64>, %offs0: tensor<?xi64>):
  sched.yield %x, %ids0, %offs0 : tensor<?xf32>, tensor<?xi64>, tensor<?xi64>
} backward {
^bb0(%g: tensor<?xf32>, %ids: tensor<?xi64>, %offs: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids : tensor<?xi64>) offsets(%offs : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x8xf32>
  sched.yield
}

// -----

// Two groups reading the same table: the verifier rejects the input (a table belongs to one
// group), before lift-sparse's final check (one lookup and one update per table) would.
// CHECK: lift-sparse-invalid.mlir:[[# @LINE + 7]]:3: error: sparse.embedding_bag_collection: table 't0' is also in the sparse.embedding_bag_collection 'emb'; a table belongs to one sharding group
// TABLE-TWICE-NOT: Traceback
// TABLE-TWICE: stdin:4:3: error: sparse.embedding_bag_collection: table 't0' is also in the sparse.embedding_bag_collection 'emb'; a table belongs to one sharding group
// TABLE-TWICE-NEXT: %p1 = sparse.embedding_bag_collection "emb2"
sched.step @table_twice world_size = 2 outputs = 1 {
^bb0(%ids0: tensor<?xi64>, %offs0: tensor<?xi64>, %ids1: tensor<?xi64>, %offs1: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "emb" ids(%ids0 : tensor<?xi64>) offsets(%offs0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x8xf32>
  %p1 = sparse.embedding_bag_collection "emb2" ids(%ids1 : tensor<?xi64>) offsets(%offs1 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 8, f32, sum>] features = [#sparse.feature<"f1" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x8xf32>
  %out = sched.dense @dense_post(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?xf32>
  sched.yield %out : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  %g0, %g1 = sched.dense @dense_post(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  sched.yield
}
