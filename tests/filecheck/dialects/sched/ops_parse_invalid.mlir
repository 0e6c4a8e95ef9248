// RUN: sparselift-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// The lane count matches the regions.
// CHECK: sched.parallel declares 2 lanes but has 1 regions
func.func @parallel_lane_count() {
  sched.parallel lanes 2 {
    sched.yield
  }
  func.return
}

// -----

// est_us is a number.
// CHECK: expected a number
func.func @cost_est_not_number() attributes {cost = #sched.cost<bytes = 0, lookups = 0, est_us = soon>} {
  func.return
}

// -----

// measured_us is a number.
// CHECK: expected a number
func.func @cost_measured_not_number() attributes {cost = #sched.cost<bytes = 0, lookups = 0, est_us = 1.0, measured_us = never>} {
  func.return
}

// -----

// A step's world_size is a non-negative integer.
// CHECK: Expected integer literal
sched.step @negative_world world_size = -2 outputs = 0 {
  sched.yield
} backward {
  sched.yield
}

// -----

// A step has a backward region.
// CHECK: Expected 'backward'
sched.step @no_backward world_size = 1 outputs = 0 {
  sched.yield
}

// -----

// A remark has a pass, a check and a text.
// CHECK: Expected ','
func.func @remark_without_text() attributes {remark = #sched.remark<"aggregate-comm", "max-bytes">} {
  func.return
}

// -----

// A remark's fields are string literals.
// CHECK: string literal expected for the check name
func.func @remark_check_not_string() attributes {remark = #sched.remark<"aggregate-comm", max_bytes, "why">} {
  func.return
}
