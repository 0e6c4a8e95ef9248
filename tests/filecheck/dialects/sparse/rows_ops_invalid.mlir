// RUN: sparselift-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Rows travel one per id only for unpooled tables.
// CHECK: sparse.gather_rows of table 't0': the table is sum-pooled; only unpooled rows go one per id
func.func @gather_pooled(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %r, %s = sparse.gather_rows %l, %i table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
  func.return
}

// -----

// A replicated table's rows are read where they are: nothing to gather for others.
// CHECK: sparse.gather_rows of table 'item': placement data_parallel (a replicated table's rows are read locally, not sent)
func.func @gather_replicated(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %r, %s = sparse.gather_rows %l, %i table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
  func.return
}

// -----

// A row-wise table's segments each hold every member at the same place (each bag's row is in
// the segment of its id's owner); members placed differently per segment are refused.
// CHECK: sparse.expand_rows: member 0 is in 2 segments, but the segments differ; a row-wise table's segments each hold every member at the same place
func.func @expand_unlike_segments(%r: tensor<?xf32>, %l: tensor<?xi32>) {
  %a, %b = sparse.expand_rows %r, %l layout = #sparse.layout<[[0 : 4, 4 : 4], [4 : 4, 0 : 4]]> dim = 4 : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>, tensor<?x4xf32>
  func.return
}

// -----

// The rows are the table's dtype.
// CHECK: rows of sparse.gather_rows of table 'item' has dtype f16 but table 'item' has f32
func.func @gather_dtype(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %r, %s = sparse.gather_rows %l, %i table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?xf16>, tensor<2xi64>
  func.return
}

// -----

// The ids are integers.
// CHECK: indices of sparse.gather_rows of table 'item' must be a 1-D integer tensor, got tensor<?xf32>
func.func @gather_float_ids(%l: tensor<?xi32>, %i: tensor<?xf32>) {
  %r, %s = sparse.gather_rows %l, %i table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] : tensor<?xi32>, tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
  func.return
}

// -----

// No slot twice.
// CHECK: sparse.gather_rows of table 'item': slots [0, 0] must be distinct, non-negative and not empty
func.func @gather_slots(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %r, %s = sparse.gather_rows %l, %i table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 0] : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
  func.return
}

// -----

// Split sizes have one entry per rank of the step.
// CHECK: splits of sparse.gather_rows of table 'item' needs one entry per rank (2), got tensor<3xi64>
sched.step @splits_per_rank world_size = 2 outputs = 0 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %r, %s = sparse.gather_rows %l, %i table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<3xi64>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// CHECK: sparse.row_splits: dim must be positive, got 0
func.func @row_splits_dim(%c: tensor<2xi64>) {
  %s = sparse.row_splits %c dim = 0 : tensor<2xi64> -> tensor<2xi64>
  func.return
}

// -----

// A member is one feature's rows: [bags, dim].
// CHECK: sparse.expand_rows: member 1 must be [bags, 4], got tensor<?x8xf32>
func.func @expand_width(%r: tensor<?xf32>, %l: tensor<?xi32>) {
  %a, %b = sparse.expand_rows %r, %l layout = #sparse.layout<[[0 : 4, 4 : 4], [0 : 0, 0 : 0]]> dim = 4 : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>, tensor<?x8xf32>
  func.return
}

// -----

// CHECK: sparse.expand_rows: layout describes 2 members but the op has 1
func.func @expand_members(%r: tensor<?xf32>, %l: tensor<?xi32>) {
  %a = sparse.expand_rows %r, %l layout = #sparse.layout<[[0 : 4, 4 : 4], [0 : 0, 0 : 0]]> dim = 4 : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>
  func.return
}

// -----

// Each member holds one slot of dim elements per sample.
// CHECK: sparse.expand_rows: member 1 is 4 : 8 in segment 0; a feature's row is one slot of 4
func.func @expand_slot(%r: tensor<?xf32>, %l: tensor<?xi32>) {
  %a, %b = sparse.expand_rows %r, %l layout = #sparse.layout<[[0 : 4, 4 : 8], [0 : 0, 0 : 0]]> dim = 4 : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>, tensor<?x4xf32>
  func.return
}

// -----

// A segment's members are its features back to back: no gap (the layout's own check).
// CHECK: layout segment 0 is not covered: gap [4, 8) before member 1
func.func @expand_gap(%r: tensor<?xf32>, %l: tensor<?xi32>) {
  %a, %b = sparse.expand_rows %r, %l layout = #sparse.layout<[[0 : 4, 8 : 4], [0 : 0, 0 : 0]]> dim = 4 : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>, tensor<?x4xf32>
  func.return
}

// -----

// Rows members are static.
// CHECK: sparse.compact_rows: member 0 is jagged in segment 0; rows members are static
func.func @compact_jagged(%l: tensor<?xi32>, %g: tensor<?x4xf32>) {
  %c = sparse.compact_rows %l, %g layout = #sparse.layout<[[? : ?], [0 : 0]]> dim = 4 : tensor<?xi32>, tensor<?x4xf32> -> tensor<?xf32>
  func.return
}

// -----

// CHECK: sparse.compact_rows: member 0 has dtype f16, the rows f32
func.func @compact_dtype(%l: tensor<?xi32>, %g: tensor<?x4xf16>) {
  %c = sparse.compact_rows %l, %g layout = #sparse.layout<[[0 : 4], [0 : 0]]> dim = 4 : tensor<?xi32>, tensor<?x4xf16> -> tensor<?xf32>
  func.return
}

// -----

// The update's gradients are rows back to back (1-D).
// CHECK: gradient of sparse.rows_update of table 'item' must be a 1-D float tensor, got tensor<?x4xf32>
func.func @update_grad_shape(%i: tensor<?xi64>, %g: tensor<?x4xf32>) {
  sparse.rows_update %i grad %g table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] optimizer = #sparse.optimizer<sgd> : tensor<?xi64>, tensor<?x4xf32>
  func.return
}

// -----

// CHECK: indices of sparse.rows_update of table 'item' must be i32 or i64, got i16
func.func @update_ids(%i: tensor<?xi16>, %g: tensor<?xf32>) {
  sparse.rows_update %i grad %g table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] optimizer = #sparse.optimizer<sgd> : tensor<?xi16>, tensor<?xf32>
  func.return
}

// -----

// The distinct ids have the routed ids' type.
// CHECK: sparse.unique_ids: unique ids have type tensor<?xi32>, the ids tensor<?xi64>
func.func @unique_type(%i: tensor<?xi64>, %s: tensor<2xi64>) {
  %u, %n, %inv = sparse.unique_ids %i, %s : tensor<?xi64>, tensor<2xi64> -> tensor<?xi32>, tensor<2xi64>, tensor<?xi64>
  func.return
}

// -----

// CHECK: sparse.take_rows: the result has type tensor<?xf16>, the rows tensor<?xf32>
func.func @take_type(%r: tensor<?xf32>, %inv: tensor<?xi64>) {
  %t = sparse.take_rows %r, %inv dim = 4 : tensor<?xf32>, tensor<?xi64> -> tensor<?xf16>
  func.return
}

// -----

// CHECK: sparse.sum_rows: dim must be positive, got 0
func.func @sum_dim(%r: tensor<?xf32>, %inv: tensor<?xi64>, %n: tensor<2xi64>) {
  %t = sparse.sum_rows %r, %inv, %n dim = 0 : tensor<?xf32>, tensor<?xi64>, tensor<2xi64> -> tensor<?xf32>
  func.return
}

// -----

// CHECK: inverse of sparse.sum_rows must be a 1-D integer tensor, got tensor<?xf32>
func.func @sum_inverse(%r: tensor<?xf32>, %inv: tensor<?xf32>, %n: tensor<2xi64>) {
  %t = sparse.sum_rows %r, %inv, %n dim = 4 : tensor<?xf32>, tensor<?xf32>, tensor<2xi64> -> tensor<?xf32>
  func.return
}
