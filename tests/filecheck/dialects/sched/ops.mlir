// RUN: sparselift-opt %s | sparselift-opt | filecheck %s
// RUN: sparselift-opt %s --print-op-generic | sparselift-opt | filecheck %s

// The smallest step: one rank, no outputs, nothing saved.
// CHECK-LABEL: sched.step @empty world_size = 1 outputs = 0 {
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  } backward {
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  }
sched.step @empty world_size = 1 outputs = 0 {
  sched.yield
} backward {
  sched.yield
}

// A step that saves values for backward (forward yields outputs, then saved values), with a
// discardable attribute dictionary; dense work in both phases.
// CHECK-LABEL: sched.step @dense_phases world_size = 8 outputs = 1 attributes {batch = 2048 : i64, note = "dlrm", kernels = "generated"} {
// CHECK-NEXT:  ^bb0(%x: tensor<?x13xf32>, %e: tensor<?x16xf32>):
// CHECK-NEXT:    %h = sched.dense @bottom(%x) phase "forward" : (tensor<?x13xf32>) -> tensor<?x16xf32>
// CHECK-NEXT:    %y, %s = sched.dense @top(%h, %e) phase "forward" : (tensor<?x16xf32>, tensor<?x16xf32>) -> (tensor<?x1xf32>, tensor<?x32xf32>)
// CHECK-NEXT:    sched.yield %y, %s : tensor<?x1xf32>, tensor<?x32xf32>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%gy: tensor<?x1xf32>, %saved: tensor<?x32xf32>):
// CHECK-NEXT:    %ge = sched.dense @top_bwd(%gy, %saved) phase "backward" : (tensor<?x1xf32>, tensor<?x32xf32>) -> tensor<?x16xf32>
// CHECK-NEXT:    sched.dense @optimizer_step() phase "backward" : () -> ()
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  }
sched.step @dense_phases world_size = 8 outputs = 1 attributes {batch = 2048 : i64, note = "dlrm", kernels = "generated"} {
^bb0(%x: tensor<?x13xf32>, %e: tensor<?x16xf32>):
  %h = sched.dense @bottom(%x) phase "forward" : (tensor<?x13xf32>) -> tensor<?x16xf32>
  %y, %s = sched.dense @top(%h, %e) phase "forward" : (tensor<?x16xf32>, tensor<?x16xf32>) -> (tensor<?x1xf32>, tensor<?x32xf32>)
  sched.yield %y, %s : tensor<?x1xf32>, tensor<?x32xf32>
} backward {
^bb1(%gy: tensor<?x1xf32>, %saved: tensor<?x32xf32>):
  %ge = sched.dense @top_bwd(%gy, %saved) phase "backward" : (tensor<?x1xf32>, tensor<?x32xf32>) -> tensor<?x16xf32>
  sched.dense @optimizer_step() phase "backward" : () -> ()
  sched.yield
}

// Parallel lanes without results.
// CHECK-LABEL: func.func @parallel_no_results(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16xf32>) {
// CHECK-NEXT:    sched.parallel lanes 3 {
// CHECK-NEXT:      sparse.fused_lookup_update %l, %i grads(%g : tensor<?x16xf32>) tables = {{\[}}#sparse.table<"t", rows = 10, dim = 16, f32, sum>] placements = {{\[}}#sparse.placement<"t", table_wise, rank = 0>] slots = {{\[}}array<i64: 0>] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>
// CHECK-NEXT:      sched.yield
// CHECK-NEXT:    }, {
// CHECK-NEXT:      sparse.fused_lookup_update %l, %i grads(%g : tensor<?x16xf32>) tables = {{\[}}#sparse.table<"u", rows = 10, dim = 16, f32, sum>] placements = {{\[}}#sparse.placement<"u", table_wise, rank = 0>] slots = {{\[}}array<i64: 0>] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>
// CHECK-NEXT:      sched.yield
// CHECK-NEXT:    }, {
// CHECK-NEXT:      sched.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @parallel_no_results(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16xf32>) {
  sched.parallel lanes 3 {
    sparse.fused_lookup_update %l, %i grads(%g : tensor<?x16xf32>) tables = [#sparse.table<"t", rows = 10, dim = 16, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0>] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>
    sched.yield
  }, {
    sparse.fused_lookup_update %l, %i grads(%g : tensor<?x16xf32>) tables = [#sparse.table<"u", rows = 10, dim = 16, f32, sum>] placements = [#sparse.placement<"u", table_wise, rank = 0>] slots = [array<i64: 0>] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>
    sched.yield
  }, {
    sched.yield
  }
  func.return
}

// Parallel lanes with results, in lane order (a lane may yield several values or none).
// CHECK-LABEL: func.func @parallel_results(%l: tensor<?xi32>, %i: tensor<?xi64>, %x: tensor<?x13xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x16xf32>) {
// CHECK-NEXT:    %r, %r_1, %r_2 = sched.parallel lanes 3 -> (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x16xf32>) {
// CHECK-NEXT:      %a = sparse.fused_lookup %l, %i tables = {{\[}}#sparse.table<"t", rows = 10, dim = 16, f32, sum>] placements = {{\[}}#sparse.placement<"t", table_wise, rank = 0>] slots = {{\[}}array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
// CHECK-NEXT:      %b = sparse.fused_lookup %l, %i tables = {{\[}}#sparse.table<"u", rows = 10, dim = 8, f32, sum>] placements = {{\[}}#sparse.placement<"u", table_wise, rank = 0>] slots = {{\[}}array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
// CHECK-NEXT:      sched.yield %a, %b : tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:    }, {
// CHECK-NEXT:      sched.yield
// CHECK-NEXT:    }, {
// CHECK-NEXT:      %d = sched.dense @bottom(%x) phase "forward" : (tensor<?x13xf32>) -> tensor<?x16xf32>
// CHECK-NEXT:      sched.yield %d : tensor<?x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %r_1, %r_2 : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x16xf32>
// CHECK-NEXT:  }
func.func @parallel_results(%l: tensor<?xi32>, %i: tensor<?xi64>, %x: tensor<?x13xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x16xf32>) {
  %r:3 = sched.parallel lanes 3 -> (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x16xf32>) {
    %a = sparse.fused_lookup %l, %i tables = [#sparse.table<"t", rows = 10, dim = 16, f32, sum>] placements = [#sparse.placement<"t", table_wise, rank = 0>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
    %b = sparse.fused_lookup %l, %i tables = [#sparse.table<"u", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"u", table_wise, rank = 0>] slots = [array<i64: 0>] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
    sched.yield %a, %b : tensor<?x16xf32>, tensor<?x8xf32>
  }, {
    sched.yield
  }, {
    %d = sched.dense @bottom(%x) phase "forward" : (tensor<?x13xf32>) -> tensor<?x16xf32>
    sched.yield %d : tensor<?x16xf32>
  }
  func.return %r#0, %r#1, %r#2 : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x16xf32>
}

// #sched.cost as a discardable attribute, with and without measured_us, on ops of every dialect.
// CHECK-LABEL: func.func @costs(%x: tensor<?x13xf32>, %l: tensor<?xi32>, %i: tensor<?xi64>) -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x16xf32>) {
// CHECK-NEXT:    %d = sched.dense @bottom(%x) phase "forward" {cost = #sched.cost<bytes = 0, lookups = 0, est_us = 0.0>} : (tensor<?x13xf32>) -> tensor<?x16xf32>
// CHECK-NEXT:    %y = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}1, 1], [1, 1]]> {cost = #sched.cost<bytes = 4096, lookups = 0, est_us = 12.5, measured_us = 11.0>} : tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %p = sparse.lookup %y, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {cost = #sched.cost<bytes = 65536, lookups = 1024, est_us = 3.0, measured_us = 0.275>} : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
// CHECK-NEXT:    %r, %r_1, %r_2 = sched.parallel lanes 1 -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x16xf32>) attributes {cost = #sched.cost<bytes = 1, lookups = 2, est_us = 1.0e-06>} {
// CHECK-NEXT:      sched.yield %d, %y, %p : tensor<?x16xf32>, tensor<?xi32>, tensor<?x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %r_1, %r_2 : tensor<?x16xf32>, tensor<?xi32>, tensor<?x16xf32>
// CHECK-NEXT:  }
func.func @costs(%x: tensor<?x13xf32>, %l: tensor<?xi32>, %i: tensor<?xi64>) -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x16xf32>) {
  %d = sched.dense @bottom(%x) phase "forward" {cost = #sched.cost<bytes = 0, lookups = 0, est_us = 0.0>} : (tensor<?x13xf32>) -> tensor<?x16xf32>
  %y = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> {cost = #sched.cost<bytes = 4096, lookups = 0, est_us = 12.5, measured_us = 11.0>} : tensor<?xi32> -> tensor<?xi32>
  %p = sparse.lookup %y, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {cost = #sched.cost<bytes = 65536, lookups = 1024, est_us = 3, measured_us = 2.75e-01>} : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  %r:3 = sched.parallel lanes 1 -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x16xf32>) attributes {cost = #sched.cost<bytes = 1, lookups = 2, est_us = 1.0e-06>} {
    sched.yield %d, %y, %p : tensor<?x16xf32>, tensor<?xi32>, tensor<?x16xf32>
  }
  func.return %r#0, %r#1, %r#2 : tensor<?x16xf32>, tensor<?xi32>, tensor<?x16xf32>
}

// #sched.remark: pass, check and text, on an op and on a function; quotes and backslashes in
// the text are escaped when printed and read back unchanged.
// CHECK-LABEL: func.func @remarks(%x: tensor<?x13xf32>) -> tensor<?x16xf32> attributes {remark = #sched.remark<"parallelize-tables", "lanes", "nothing to do: groups=1, at least 2 lanes are needed">} {
// CHECK-NEXT:    %d = sched.dense @bottom(%x) phase "forward" {remark = #sched.remark<"aggregate-comm", "max-bytes", "not merged: \22a\22 \\ over max-bytes 1">} : (tensor<?x13xf32>) -> tensor<?x16xf32>
// CHECK-NEXT:    func.return %d : tensor<?x16xf32>
// CHECK-NEXT:  }
func.func @remarks(%x: tensor<?x13xf32>) -> tensor<?x16xf32> attributes {remark = #sched.remark<"parallelize-tables", "lanes", "nothing to do: groups=1, at least 2 lanes are needed">} {
  %d = sched.dense @bottom(%x) phase "forward" {remark = #sched.remark<"aggregate-comm", "max-bytes", "not merged: \"a\" \\ over max-bytes 1">} : (tensor<?x13xf32>) -> tensor<?x16xf32>
  func.return %d : tensor<?x16xf32>
}

// A step-level cost annotation and a parallel region inside a step.
// CHECK-LABEL: sched.step @step_with_parallel world_size = 2 outputs = 1 attributes {cost = #sched.cost<bytes = 10, lookups = 2, est_us = 1.5, measured_us = 1.25>} {
// CHECK-NEXT:  ^bb0(%x: tensor<?x13xf32>):
// CHECK-NEXT:    %r = sched.parallel lanes 2 -> (tensor<?x16xf32>) {
// CHECK-NEXT:      %d = sched.dense @bottom(%x) phase "forward" : (tensor<?x13xf32>) -> tensor<?x16xf32>
// CHECK-NEXT:      sched.yield %d : tensor<?x16xf32>
// CHECK-NEXT:    }, {
// CHECK-NEXT:      sched.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    sched.yield %r : tensor<?x16xf32>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%g: tensor<?x16xf32>):
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  }
sched.step @step_with_parallel world_size = 2 outputs = 1 attributes {cost = #sched.cost<bytes = 10, lookups = 2, est_us = 1.5, measured_us = 1.25>} {
^bb0(%x: tensor<?x13xf32>):
  %r = sched.parallel lanes 2 -> (tensor<?x16xf32>) {
    %d = sched.dense @bottom(%x) phase "forward" : (tensor<?x13xf32>) -> tensor<?x16xf32>
    sched.yield %d : tensor<?x16xf32>
  }, {
    sched.yield
  }
  sched.yield %r : tensor<?x16xf32>
} backward {
^bb1(%g: tensor<?x16xf32>):
  sched.yield
}
