// RUN: sparselift-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect | filecheck %s

// The fused table ops (`sparse.fused_lookup`, `sparse.fused_lookup_update`,
// `sparse.fused_lookup_grad`): every verifier error, with the op and table it names.
// (`test.op` stands in for a producer of gradients.)

//===----------------------------------------------------------------------===//
// Tables, placements, slots and the values per table
//===----------------------------------------------------------------------===//

// Property constraints are declarative: a fused update needs its optimizer (generic form).
// CHECK: property 'optimizer' expected in operation 'sparse.fused_lookup_update'
func.func @fused_update_without_optimizer(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf32>) {
  "sparse.fused_lookup_update"(%l, %i, %g) <{tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t", table_wise, rank = 0>], slots = [array<i64: 0>], operandSegmentSizes = array<i32: 1, 1, 0, 1>}> : (tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>) -> ()
  func.return
}

// -----

// Slots are i64 arrays, one per table (declarative).
// CHECK: Expected attribute i64 but got i32
func.func @fused_slots_not_i64(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = "sparse.fused_lookup"(%l, %i) <{tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t", table_wise, rank = 0>], slots = [array<i32: 0>], operandSegmentSizes = array<i32: 1, 1, 0>}> : (tensor<?xi32>, tensor<?xi64>) -> tensor<?x8xf32>
  func.return
}

// -----

// One placement and one slot list per table.
// CHECK: sparse.fused_lookup: 'tables', 'placements' and 'slots' must list the same tables
func.func @fused_lists_differ(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p0, %p1 = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>, #sparse.table<"u", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0>, array<i64: 1>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>, tensor<?x8xf32>
  func.return
}

// -----

// A fused op fuses at least one table.
// CHECK: sparse.fused_lookup: 'tables', 'placements' and 'slots' must list the same tables
func.func @fused_no_tables(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  sparse.fused_lookup %l, %i tables = [] placements = [] slots = [] : tensor<?xi32>, tensor<?xi64> ->
  func.return
}

// -----

// Each placement is its table's.
// CHECK: sparse.fused_lookup: placement is for table 'u' but the op reads 't'
func.func @fused_placement_other_table(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"u", table_wise, rank = 0>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  func.return
}

// -----

// Row ranges cover the table (as for a per-table op).
// CHECK: placement of table 't': row ranges cover rows [0, 8) but the table has 10 rows
func.func @fused_row_ranges(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", row_wise, ranks = [0, 1], row_bounds = [0, 5, 8]>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  func.return
}

// -----

// Slots are distinct, non-negative and not empty (outside a step too).
// CHECK: sparse.fused_lookup: slots of table 't' must be distinct, non-negative and not empty, got [0, 0]
func.func @fused_slots_repeat(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0, 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  func.return
}

// -----

// CHECK: sparse.fused_lookup: slots of table 't' must be distinct, non-negative and not empty, got [-1]
func.func @fused_slot_negative(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: -1>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  func.return
}

// -----

// CHECK: sparse.fused_lookup: slots of table 't' must be distinct, non-negative and not empty, got []
func.func @fused_slots_empty(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  func.return
}

// -----

// One call runs on one set of ranks: the plan guards it by the first table's owners.
// CHECK: sparse.fused_lookup: fuses tables of different ranks: 't0' on [1], 't1' on [0]
sched.step @fused_mixed_ranks world_size = 2 outputs = 2 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %p0, %p1 = sparse.fused_lookup %l, %i tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 0>] slots = [array<i64: 0>, array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>, tensor<?x8xf32>
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// Placements name ranks of the step.
// CHECK: placement of table 't0': rank 2 is out of range for world size 2
sched.step @fused_rank_outside_world world_size = 2 outputs = 1 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %p0 = sparse.fused_lookup %l, %i tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 2>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p0 : tensor<?x4xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>):
  sched.yield
}

// -----

// The shared ids: i32 or i64 indices, float weights.
// CHECK: indices of sparse.fused_lookup must be i32 or i64, got i16
func.func @fused_indices_i16(%l: tensor<?xi32>, %i: tensor<?xi16>) {
  %p = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi16> -> tensor<?x8xf32>
  func.return
}

// -----

// CHECK: weights of sparse.fused_lookup must be a 1-D float tensor, got tensor<?xi32>
func.func @fused_weights_int(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xi32>) {
  %p = sparse.fused_lookup %l, %i weights %w : tensor<?xi32> tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  func.return
}

// -----

// A fused lookup returns one pooled value per table, [bags, dim x slots] in its dtype.
// CHECK: sparse.fused_lookup: needs one result per table (1 table), got 2
func.func @fused_result_count(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p0, %p1 = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>, tensor<?x8xf32>
  func.return
}

// -----

// CHECK: sparse.fused_lookup: result for table 't' must be [bags, 16] (2 slots), got tensor<?x8xf32>
func.func @fused_result_width(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0, 1>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  func.return
}

// -----

// CHECK: sparse.fused_lookup: result for table 't' has dtype f16 but table 't' has dtype f32
func.func @fused_result_dtype(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf16>
  func.return
}

// -----

// A fused update reads one pooled gradient per table, [bags, dim x slots].
// CHECK: sparse.fused_lookup_update: needs one gradient per table (2 tables), got 1
func.func @fused_update_grad_count(%l: tensor<?xi32>, %i: tensor<?xi64>, %g0: tensor<?x4xf32>) {
  sparse.fused_lookup_update %l, %i grads(%g0 : tensor<?x4xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>] slots = [array<i64: 0>, array<i64: 1>] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>
  func.return
}

// -----

// CHECK: sparse.fused_lookup_update: gradient for table 't1' must be [bags, 8] (1 slot), got tensor<?x16xf32>
func.func @fused_update_grad_width(%l: tensor<?xi32>, %i: tensor<?xi64>, %g0: tensor<?x4xf32>, %g1: tensor<?x16xf32>) {
  sparse.fused_lookup_update %l, %i grads(%g0, %g1 : tensor<?x4xf32>, tensor<?x16xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>] slots = [array<i64: 0>, array<i64: 1>] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>
  func.return
}

// -----

// A fused table gradient returns each table's whole gradient, [rows, dim], one per table.
// CHECK: sparse.fused_lookup_grad: table gradient of 't' must have the table's shape [10, 8], got tensor<?x8xf32>
func.func @fused_table_grad_shape(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf32>) {
  %t = sparse.fused_lookup_grad %l, %i grads(%g : tensor<?x8xf32>) tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", data_parallel>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  func.return
}

// -----

// CHECK: sparse.fused_lookup_grad: needs one table gradient per table (1 table), got 0
func.func @fused_table_grad_count(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf32>) {
  sparse.fused_lookup_grad %l, %i grads(%g : tensor<?x8xf32>) tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", data_parallel>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> ->
  func.return
}

// -----

// ... from one pooled gradient per table.
// CHECK: sparse.fused_lookup_grad: gradient for table 't' must be [bags, 8] (1 slot), got tensor<?x4xf32>
func.func @fused_table_grad_grads(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x4xf32>) {
  %t = sparse.fused_lookup_grad %l, %i grads(%g : tensor<?x4xf32>) tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t", data_parallel>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<10x8xf32>
  func.return
}

// -----

// ... or one per slot, [bags, dim] each, table after table: here t's second slot is too wide.
// CHECK: sparse.fused_lookup_grad: gradient of slot 1 of table 't' must be [bags, 4] (one gradient per slot), got tensor<?x8xf32>
func.func @fused_table_grad_per_slot_width(%l: tensor<?xi32>, %i: tensor<?xi64>, %a: tensor<?x4xf32>, %b: tensor<?x8xf32>, %c: tensor<?x2xf32>) {
  %t, %u = sparse.fused_lookup_grad %l, %i grads(%a, %b, %c : tensor<?x4xf32>, tensor<?x8xf32>, tensor<?x2xf32>) tables = [#sparse.table<"t", rows = 10, dim = 4, f32, none>, #sparse.table<"u", rows = 6, dim = 2, f32, sum>] placements = [#sparse.placement<"t", data_parallel>, #sparse.placement<"u", data_parallel>] slots = [array<i64: 0, 1>, array<i64: 2>] : tensor<?xi32>, tensor<?xi64> -> tensor<10x4xf32>, tensor<6x2xf32>
  func.return
}

// -----

// Neither one gradient per table (2) nor one per slot (3).
// CHECK: sparse.fused_lookup_grad: needs one gradient per table (2 tables) or one per slot (3 slots), got 4
func.func @fused_table_grad_neither_form(%l: tensor<?xi32>, %i: tensor<?xi64>, %a: tensor<?x4xf32>, %c: tensor<?x2xf32>) {
  %t, %u = sparse.fused_lookup_grad %l, %i grads(%a, %a, %a, %c : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x2xf32>) tables = [#sparse.table<"t", rows = 10, dim = 4, f32, none>, #sparse.table<"u", rows = 6, dim = 2, f32, sum>] placements = [#sparse.placement<"t", data_parallel>, #sparse.placement<"u", data_parallel>] slots = [array<i64: 0, 1>, array<i64: 2>] : tensor<?xi32>, tensor<?xi64> -> tensor<10x4xf32>, tensor<6x2xf32>
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// The fused ops' tables against the routes of the enclosing sched.step (`_refs`)
//===----------------------------------------------------------------------===//

// A slot beyond the owner's segment (2 features on rank 1).
// CHECK: sparse.fused_lookup, table 't1': slots [7], but the sparse.route of group 'g' puts feature 'f1' of this table at slots [1] of rank 1's segment (2 features)
sched.step @fused_slot_beyond_segment world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p0, %p1 = sparse.fused_lookup %rl, %ri tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] slots = [array<i64: 0>, array<i64: 7>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>, tensor<?x8xf32>
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// Each table of the fused op is one the step routes.
// CHECK: sparse.fused_lookup, table 't9': no sparse.route of @fused_unrouted_table routes a feature to table 't9' (no feature reads it)
sched.step @fused_unrouted_table world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p0, %p1 = sparse.fused_lookup %rl, %ri tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t9", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t9", table_wise, rank = 1>] slots = [array<i64: 0>, array<i64: 1>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>, tensor<?x8xf32>
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// ... placed where the route places it.
// CHECK: sparse.fused_lookup, table 't1': placement #sparse.placement<"t1", table_wise, rank = 0> differs from #sparse.placement<"t1", table_wise, rank = 1> in the sparse.route of group 'g'
sched.step @fused_placement_differs world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p0 = sparse.lookup %rl, %ri table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 1> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  %p1 = sparse.fused_lookup %rl, %ri tables = [#sparse.table<"t1", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t1", table_wise, rank = 0>] slots = [array<i64: 1>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// The same table is declared the same way everywhere in the step.
// CHECK: sparse.fused_lookup, table 't0': #sparse.table<"t0", rows = 10, dim = 4, f32, mean> differs from #sparse.table<"t0", rows = 10, dim = 4, f32, sum> in the sparse.lookup of @fused_table_differs
sched.step @fused_table_differs world_size = 1 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %p0 = sparse.lookup %l, %ix table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  %p1 = sparse.fused_lookup %l, %ix tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, mean>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] slots = [array<i64: 0>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x4xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x4xf32>):
  sched.yield
}

// -----

// Weights are read exactly when a table has weighted features.
// CHECK: sparse.fused_lookup, table 't0': reads per-sample weights but no feature of table 't0' is weighted
sched.step @fused_weights_extra world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %w: tensor<?xf32>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %p0 = sparse.fused_lookup %l, %ix weights %w : tensor<?xf32> tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] slots = [array<i64: 0>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p0 : tensor<?x4xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>):
  sched.yield
}

// -----

// CHECK: sparse.fused_lookup_update, table 't0': table 't0' has weighted features but the op reads no weights
sched.step @fused_weights_missing world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %w: tensor<?xf32>):
  %l, %ix, %sp, %rw = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) weights(%w : tensor<?xf32>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>, tensor<?xf32>
  sched.yield %l, %ix : tensor<?xi32>, tensor<?xi64>
} backward {
^bb1(%sl: tensor<?xi32>, %si: tensor<?xi64>):
  %g = "test.op"() : () -> tensor<?x4xf32>
  sparse.fused_lookup_update %sl, %si grads(%g : tensor<?x4xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] slots = [array<i64: 0>] optimizer = #sparse.optimizer<sgd> {group = "g"} : tensor<?xi32>, tensor<?xi64>
  sched.yield
}

// -----

// A fused op reads the lengths of the route of its tables' group.
// CHECK: sparse.fused_lookup, table 't1': its lengths come from the sparse.route of group 'a', which does not route table 't1' (the sparse.route of group 'b' does)
sched.step @fused_lengths_of_other_route world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "a"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %l1, %ix1, %sp1 = sparse.route ids(%i1 : tensor<?xi64>) offsets(%o1 : tensor<?xi64>) features = [#sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t1", table_wise, rank = 0>] world_size = 1 {group = "b"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %p = sparse.fused_lookup %l, %ix tables = [#sparse.table<"t1", rows = 10, dim = 4, f32, sum>] placements = [#sparse.placement<"t1", table_wise, rank = 0>] slots = [array<i64: 0>] {group = "b"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// Its group label names a sharding group of the step.
// CHECK: sparse.fused_lookup: group 'h' is not a sharding group of @fused_unknown_group (its routes define 'g')
sched.step @fused_unknown_group world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %p = sparse.fused_lookup %l, %ix tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] slots = [array<i64: 0>] {group = "h"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}
