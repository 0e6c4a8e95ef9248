// RUN: sparselift-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect | filecheck %s

// Unregistered ops (`test.terminator`) stand in for a foreign terminator: with a registered
// non-terminator last op, xDSL's generic region check fires before the sched verifiers.

//===----------------------------------------------------------------------===//
// #sched.cost
//===----------------------------------------------------------------------===//

// bytes are non-negative.
// CHECK: cost bytes and lookups must be non-negative
func.func @cost_negative_bytes(%x: tensor<?x13xf32>) -> tensor<?x16xf32> {
  %d = sched.dense @bottom(%x) phase "forward" {cost = #sched.cost<bytes = -1, lookups = 0, est_us = 1.0>} : (tensor<?x13xf32>) -> tensor<?x16xf32>
  func.return %d : tensor<?x16xf32>
}

// -----

// lookups are non-negative.
// CHECK: cost bytes and lookups must be non-negative
func.func @cost_negative_lookups() attributes {cost = #sched.cost<bytes = 0, lookups = -8, est_us = 1.0>} {
  func.return
}

// -----

// est_us is finite.
// CHECK: cost est_us must be finite, got inf
func.func @cost_infinite_est() attributes {cost = #sched.cost<bytes = 0, lookups = 0, est_us = 1.0e999>} {
  func.return
}

// -----

// est_us is non-negative.
// CHECK: cost est_us must be non-negative
func.func @cost_negative_est() attributes {cost = #sched.cost<bytes = 0, lookups = 0, est_us = -2.5>} {
  func.return
}

// -----

// measured_us is finite.
// CHECK: cost measured_us must be finite, got inf
func.func @cost_infinite_measured() attributes {cost = #sched.cost<bytes = 0, lookups = 0, est_us = 1.0, measured_us = 1.0e999>} {
  func.return
}

// -----

// measured_us is non-negative.
// CHECK: cost measured_us must be non-negative
func.func @cost_negative_measured() attributes {cost = #sched.cost<bytes = 0, lookups = 0, est_us = 1.0, measured_us = -1>} {
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// sched.step
//===----------------------------------------------------------------------===//

// A step runs on at least one rank.
// CHECK: sched.step @no_ranks: world_size must be at least 1
sched.step @no_ranks world_size = 0 outputs = 0 {
  sched.yield
} backward {
  sched.yield
}

// -----

// The forward region ends with sched.yield.
// CHECK: the forward region must end with sched.yield
sched.step @forward_no_yield world_size = 1 outputs = 0 {
  "test.terminator"() : () -> ()
} backward {
  sched.yield
}

// -----

// The backward region ends with sched.yield.
// CHECK: the backward region must end with sched.yield
sched.step @backward_no_yield world_size = 1 outputs = 0 {
  sched.yield
} backward {
  "test.terminator"() : () -> ()
}

// -----

// The forward region yields at least the declared outputs.
// CHECK: sched.step @too_many_outputs: 2 outputs declared but forward yields 1 values
sched.step @too_many_outputs world_size = 1 outputs = 2 {
^bb0(%x: tensor<?x16xf32>):
  sched.yield %x : tensor<?x16xf32>
} backward {
^bb1(%g: tensor<?x16xf32>):
  sched.yield
}

// -----

// Backward takes one gradient per output and then the saved values, in order.
// CHECK: sched.step @backward_args: backward arguments must be one gradient per output and then the saved values, with types ['tensor<?x16xf32>', 'tensor<?xi64>']; got ['tensor<?x16xf32>']
sched.step @backward_args world_size = 1 outputs = 1 {
^bb0(%x: tensor<?x16xf32>, %i: tensor<?xi64>):
  sched.yield %x, %i : tensor<?x16xf32>, tensor<?xi64>
} backward {
^bb1(%g: tensor<?x16xf32>):
  sched.yield
}

// -----

// Backward argument types follow the forward yield.
// CHECK: sched.step @backward_arg_types: backward arguments must be one gradient per output and then the saved values, with types ['tensor<?x16xf32>']; got ['tensor<?x16xf16>']
sched.step @backward_arg_types world_size = 1 outputs = 1 {
^bb0(%x: tensor<?x16xf32>):
  sched.yield %x : tensor<?x16xf32>
} backward {
^bb1(%g: tensor<?x16xf16>):
  sched.yield
}

// -----

//===----------------------------------------------------------------------===//
// sched.dense / sched.kernel
//===----------------------------------------------------------------------===//

// A dense region runs in the forward or the backward phase.
// CHECK: sched.dense @top: phase must be forward or backward
func.func @dense_bad_phase(%x: tensor<?x16xf32>) -> tensor<?x1xf32> {
  %y = sched.dense @top(%x) phase "update" : (tensor<?x16xf32>) -> tensor<?x1xf32>
  func.return %y : tensor<?x1xf32>
}

// -----

// Unknown kernel kind.
// CHECK: sched.kernel @k: unknown kind 'gather'; expected one of lookup, lookup_update, lookup_grad, pack, unpack
func.func @kernel_bad_kind(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?x16xf32> {
  %y = sched.kernel @k(%l, %i) kind "gather" : (tensor<?xi32>, tensor<?xi64>) -> tensor<?x16xf32>
  func.return %y : tensor<?x16xf32>
}

// -----

//===----------------------------------------------------------------------===//
// sched.parallel
//===----------------------------------------------------------------------===//

// A parallel op has at least one lane (generic form: the custom parser needs a region).
// CHECK: sched.parallel needs at least one lane
func.func @parallel_no_lane() {
  "sched.parallel"() : () -> ()
  func.return
}

// -----

// Every lane ends with sched.yield.
// CHECK: sched.parallel lane 1 must end with sched.yield
func.func @parallel_lane_no_yield() {
  sched.parallel lanes 2 {
    sched.yield
  }, {
    sched.kernel @k() kind "pack" : () -> ()
    "test.terminator"() : () -> ()
  }
  func.return
}

// -----

// Results are the lanes' yielded values, in lane order.
// CHECK: sched.parallel: results must be the lanes' yielded values in lane order, expected ['tensor<?x8xf32>', 'tensor<?x16xf32>']
func.func @parallel_result_order(%a: tensor<?x16xf32>, %b: tensor<?x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %r:2 = sched.parallel lanes 2 -> (tensor<?x16xf32>, tensor<?x8xf32>) {
    sched.yield %b : tensor<?x8xf32>
  }, {
    sched.yield %a : tensor<?x16xf32>
  }
  func.return %r#0, %r#1 : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// Lanes run concurrently: a lane may not read the parallel op's own results.
// CHECK: sched.parallel: lane 1 uses result 0 of the sched.parallel itself
func.func @parallel_reads_own_result(%a: tensor<?x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  %r:2 = sched.parallel lanes 2 -> (tensor<?x16xf32>, tensor<?x16xf32>) {
    sched.yield %a : tensor<?x16xf32>
  }, {
    %p = "sparse.permute"(%r#0) <{order = array<i64: 0>}> : (tensor<?x16xf32>) -> tensor<?x16xf32>
    sched.yield %p : tensor<?x16xf32>
  }
  func.return %r#0, %r#1 : tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// A lane's yielded value must be a result.
// CHECK: sched.parallel: results must be the lanes' yielded values in lane order, expected ['tensor<?x16xf32>']
func.func @parallel_missing_result(%a: tensor<?x16xf32>) {
  sched.parallel lanes 1 {
    sched.yield %a : tensor<?x16xf32>
  }
  func.return
}

// -----

// A value used before the op that defines it (e.g. a schedule that moved a use above its wait).
// CHECK: sched.step @use_before_def: sparse.permute uses a value of coll.wait before it is defined
sched.step @use_before_def world_size = 2 outputs = 1 {
^bb0(%x: tensor<?xi64>):
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_indices> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi64> -> !coll.handle<tensor<?xi64>>
  %p = "sparse.permute"(%y) <{order = array<i64: 0>}> : (tensor<?xi64>) -> tensor<?xi64>
  %y = coll.wait %h : !coll.handle<tensor<?xi64>> -> tensor<?xi64>
  sched.yield %p : tensor<?xi64>
} backward {
^bb0(%g: tensor<?xi64>):
  sched.yield
}

// -----

// A fused lookup kernel needs its tables' description.
// CHECK: sched.kernel @k: a fused table kernel needs 'tables', 'placements' and 'slots' attributes
func.func @kernel_without_tables(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sched.kernel @k(%l, %i) kind "lookup" : (tensor<?xi32>, tensor<?xi64>) -> tensor<?x8xf32>
  func.return
}

// -----

// A fused lookup returns [bags, dim x slots] per table.
// CHECK: sched.kernel @k: result for table 't' must be [bags, 16], got tensor<?x8xf32>
func.func @kernel_result_width(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sched.kernel @k(%l, %i) kind "lookup" {tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t", table_wise, rank = 0>], slots = [array<i64: 0, 1>]} : (tensor<?xi32>, tensor<?xi64>) -> tensor<?x8xf32>
  func.return
}

// -----

// A fused table gradient returns each table's whole gradient, [rows, dim].
// CHECK: sched.kernel @k: table gradient of 't' must be [10, 8], got tensor<?x8xf32>
func.func @kernel_table_grad_shape(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf32>) {
  %t = sched.kernel @k(%l, %i, %g) kind "lookup_grad" {tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t", data_parallel>], slots = [array<i64: 0>]} : (tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return
}

// -----

// One table gradient per table.
// CHECK: sched.kernel @k: a fused table gradient takes lengths, indices[, weights] and one gradient per table, and returns one table gradient per table
func.func @kernel_table_grad_count(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf32>) {
  sched.kernel @k(%l, %i, %g) kind "lookup_grad" {tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t", data_parallel>], slots = [array<i64: 0>]} : (tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>) -> ()
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// sched.kernel: its tables against the routes of the enclosing sched.step
//===----------------------------------------------------------------------===//

// A fused kernel's routed step (rank 1 holds f0 then f1): this one verifies (it is printed).
// CHECK-LABEL: sched.step @kernel_routed
// CHECK: sched.kernel @k(%rl, %ri) kind "lookup"
sched.step @kernel_routed world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p0, %p1 = sched.kernel @k(%rl, %ri) kind "lookup" {tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>], slots = [array<i64: 0>, array<i64: 1>], group = "g"} : (tensor<?xi32>, tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?x8xf32>)
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// A slot beyond the owner's segment (2 features on rank 1) passed into the plan before.
// CHECK: sched.kernel @k, table 't1': slots [7], but the sparse.route of group 'g' puts feature 'f1' of this table at slots [1] of rank 1's segment (2 features)
sched.step @kernel_slot_beyond_segment world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p0, %p1 = sched.kernel @k(%rl, %ri) kind "lookup" {tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>], slots = [array<i64: 0>, array<i64: 7>], group = "g"} : (tensor<?xi32>, tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?x8xf32>)
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// Each table of the kernel is one the step routes.
// CHECK: sched.kernel @k, table 't9': no sparse.route of @kernel_unrouted_table routes a feature to table 't9' (no feature reads it)
sched.step @kernel_unrouted_table world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p0, %p1 = sched.kernel @k(%rl, %ri) kind "lookup" {tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t9", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t9", table_wise, rank = 1>], slots = [array<i64: 0>, array<i64: 1>], group = "g"} : (tensor<?xi32>, tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?x8xf32>)
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// ... placed where the route places it.
// CHECK: sched.kernel @k, table 't1': placement #sparse.placement<"t1", table_wise, rank = 0> differs from #sparse.placement<"t1", table_wise, rank = 1> in the sparse.route of group 'g'
sched.step @kernel_placement_differs world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p0 = sparse.lookup %rl, %ri table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 1> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  %p1 = sched.kernel @k(%rl, %ri) kind "lookup" {tables = [#sparse.table<"t1", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t1", table_wise, rank = 0>], slots = [array<i64: 1>], group = "g"} : (tensor<?xi32>, tensor<?xi64>) -> tensor<?x8xf32>
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// One call runs on one set of ranks: the plan guards it by the first table's owners.
// CHECK: sched.kernel @k: fuses tables of different ranks: 't0' on [1], 't1' on [0]
sched.step @kernel_mixed_ranks world_size = 2 outputs = 2 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %p0, %p1 = sched.kernel @k(%l, %i) kind "lookup" {tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 0>], slots = [array<i64: 0>, array<i64: 0>]} : (tensor<?xi32>, tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?x8xf32>)
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// Weights are read exactly when a table has weighted features.
// CHECK: sched.kernel @k, table 't0': reads per-sample weights but no feature of table 't0' is weighted
sched.step @kernel_weights_extra world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %w: tensor<?xf32>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %p0 = sched.kernel @k(%l, %ix, %w) kind "lookup" {tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>], placements = [#sparse.placement<"t0", table_wise, rank = 0>], slots = [array<i64: 0>], group = "g"} : (tensor<?xi32>, tensor<?xi64>, tensor<?xf32>) -> tensor<?x4xf32>
  sched.yield %p0 : tensor<?x4xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>):
  sched.yield
}

// -----

// Slots are distinct, non-negative and not empty (outside a step too).
// CHECK: sched.kernel @k: slots of table 't' must be distinct, non-negative and not empty, got [0, 0]
func.func @kernel_slots_repeat(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sched.kernel @k(%l, %i) kind "lookup" {tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t", table_wise, rank = 0>], slots = [array<i64: 0, 0>]} : (tensor<?xi32>, tensor<?xi64>) -> tensor<?x16xf32>
  func.return
}

// -----

// CHECK: sched.kernel @k: slots of table 't' must be distinct, non-negative and not empty, got [-1]
func.func @kernel_slot_negative(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %p = sched.kernel @k(%l, %i) kind "lookup" {tables = [#sparse.table<"t", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t", table_wise, rank = 0>], slots = [array<i64: -1>]} : (tensor<?xi32>, tensor<?xi64>) -> tensor<?x8xf32>
  func.return
}

// -----

// A fused update's gradients are [bags, dim x slots] per table.
// CHECK: sched.kernel @k: gradient for table 't1' must be [bags, 8] (1 slot), got tensor<?x16xf32>
func.func @kernel_update_grad_width(%l: tensor<?xi32>, %i: tensor<?xi64>, %g0: tensor<?x4xf32>, %g1: tensor<?x16xf32>) {
  sched.kernel @k(%l, %i, %g0, %g1) kind "lookup_update" {tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>], placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>], slots = [array<i64: 0>, array<i64: 1>], optimizer = #sparse.optimizer<sgd, lr = 0.1>} : (tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32>, tensor<?x16xf32>) -> ()
  func.return
}
