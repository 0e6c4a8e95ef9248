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
// #sched.remark
//===----------------------------------------------------------------------===//

// The pass is named.
// CHECK: remark pass name must be non-empty kebab-case, got ''
func.func @remark_empty_pass() attributes {remark = #sched.remark<"", "lanes", "why">} {
  func.return
}

// -----

// The check is kebab-case: no spaces.
// CHECK: remark check name must be non-empty kebab-case, got 'max bytes'
func.func @remark_check_with_space() attributes {remark = #sched.remark<"aggregate-comm", "max bytes", "why">} {
  func.return
}

// -----

// The check is kebab-case: no capitals, underscores or trailing dashes.
// CHECK: remark check name must be non-empty kebab-case, got 'Max_bytes-'
func.func @remark_check_not_kebab() attributes {remark = #sched.remark<"aggregate-comm", "Max_bytes-", "why">} {
  func.return
}

// -----

// The pass is kebab-case.
// CHECK: remark pass name must be non-empty kebab-case, got 'aggregate_comm'
func.func @remark_pass_not_kebab() attributes {remark = #sched.remark<"aggregate_comm", "dependency", "why">} {
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

// The example batch is a positive integer.
// CHECK: sched.step @bad_batch: batch must be a positive integer, got "eight"
sched.step @bad_batch world_size = 1 outputs = 0 attributes {batch = "eight"} {
  sched.yield
} backward {
  sched.yield
}

// -----

// The model's name is a string (a declared attribute, checked by its constraint).
// CHECK: 3 : i64 should be of base attribute string
sched.step @bad_model world_size = 1 outputs = 0 attributes {model = 3 : i64} {
  sched.yield
} backward {
  sched.yield
}

// -----

// The table ops' lowering is "generated" or "reference".
// CHECK: sched.step @bad_kernels: kernels must be one of generated, reference, got 'triton'
sched.step @bad_kernels world_size = 1 outputs = 0 attributes {kernels = "triton"} {
  sched.yield
} backward {
  sched.yield
}

// -----

// table_params maps a table to its state-dict parameter name.
// CHECK: sched.step @bad_params: table_params['t0'] must be a parameter name, got 3 : i64
sched.step @bad_params world_size = 1 outputs = 0 attributes {batch = "8", table_params = {t0 = 3 : i64}} {
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
// sched.dense
//===----------------------------------------------------------------------===//

// A dense region runs in the forward or the backward phase.
// CHECK: sched.dense @top: phase must be forward or backward
func.func @dense_bad_phase(%x: tensor<?x16xf32>) -> tensor<?x1xf32> {
  %y = sched.dense @top(%x) phase "update" : (tensor<?x16xf32>) -> tensor<?x1xf32>
  func.return %y : tensor<?x1xf32>
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
    "test.op"() : () -> ()
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
