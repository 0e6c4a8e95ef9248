// RUN: sparselift-opt %s | sparselift-opt | filecheck %s
// RUN: sparselift-opt %s --print-op-generic | sparselift-opt | filecheck %s

// Static per-sample splits over a two-rank group.
// CHECK-LABEL: func.func @all_to_all_static(%x: tensor<?xi32>) -> tensor<?xi32> {
// CHECK-NEXT:    %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}1, 2], [3, 0]]> : tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    func.return %y : tensor<?xi32>
// CHECK-NEXT:  }
func.func @all_to_all_static(%x: tensor<?xi32>) -> tensor<?xi32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 2], [3, 0]]> : tensor<?xi32> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// Dynamic send_splits: the received split sizes are a second result.
// CHECK-LABEL: func.func @all_to_all_send_splits(%x: tensor<?xi64>, %s: tensor<3xi64>) -> (tensor<?xi64>, tensor<3xi64>) {
// CHECK-NEXT:    %y, %r = coll.all_to_all %x on #coll.group<[0, 1, 2]> role #coll.role<input_indices> send_splits(%s : tensor<3xi64>) : tensor<?xi64> -> tensor<?xi64>, tensor<3xi64>
// CHECK-NEXT:    func.return %y, %r : tensor<?xi64>, tensor<3xi64>
// CHECK-NEXT:  }
func.func @all_to_all_send_splits(%x: tensor<?xi64>, %s: tensor<3xi64>) -> (tensor<?xi64>, tensor<3xi64>) {
  %y, %r = coll.all_to_all %x on #coll.group<[0, 1, 2]> role #coll.role<input_indices> send_splits(%s : tensor<3xi64>) : tensor<?xi64> -> tensor<?xi64>, tensor<3xi64>
  func.return %y, %r : tensor<?xi64>, tensor<3xi64>
}

// send_splits together with already-known recv_splits.
// CHECK-LABEL: func.func @all_to_all_send_recv_splits(%x: tensor<?xf32>, %s: tensor<2xi64>, %r: tensor<?xi32>) -> (tensor<?xf32>, tensor<2xi64>) {
// CHECK-NEXT:    %y, %rs = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_weights> send_splits(%s : tensor<2xi64>) recv_splits(%r : tensor<?xi32>) : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:    func.return %y, %rs : tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:  }
func.func @all_to_all_send_recv_splits(%x: tensor<?xf32>, %s: tensor<2xi64>, %r: tensor<?xi32>) -> (tensor<?xf32>, tensor<2xi64>) {
  %y, %rs = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_weights> send_splits(%s : tensor<2xi64>) recv_splits(%r : tensor<?xi32>) : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
  func.return %y, %rs : tensor<?xf32>, tensor<2xi64>
}

// One input per group rank (rank i sends inputs[i]).
// CHECK-LABEL: func.func @all_to_all_per_rank(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
// CHECK-NEXT:    %y = coll.all_to_all %a, %b on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}16, 8], [16, 8]]> : tensor<?xf32>, tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:    func.return %y : tensor<?xf32>
// CHECK-NEXT:  }
func.func @all_to_all_per_rank(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
  %y = coll.all_to_all %a, %b on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[16, 8], [16, 8]]> : tensor<?xf32>, tensor<?xf32> -> tensor<?xf32>
  func.return %y : tensor<?xf32>
}

// Unpooled rows and pooled vectors in one (aggregated) output exchange, and their gradients.
// CHECK-LABEL: func.func @rows_and_pooled(%x: tensor<?xf32>, %g: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
// CHECK-NEXT:    %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<output_pooled, output_rows> splits #coll.splits<{{\[\[}}40, 8], [40, 8]]> : tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:    %h = coll.all_to_all %g on #coll.group<[0, 1]> role #coll.role<grad_rows> splits #coll.splits<{{\[\[}}32, 32], [32, 32]]> : tensor<?xf32> -> tensor<?xf32>
func.func @rows_and_pooled(%x: tensor<?xf32>, %g: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<output_pooled, output_rows> splits #coll.splits<[[40, 8], [40, 8]]> : tensor<?xf32> -> tensor<?xf32>
  %h = coll.all_to_all %g on #coll.group<[0, 1]> role #coll.role<grad_rows> splits #coll.splits<[[32, 32], [32, 32]]> : tensor<?xf32> -> tensor<?xf32>
  func.return %y, %h : tensor<?xf32>, tensor<?xf32>
}

// An aggregated collective carrying several roles; a one-rank group.
// CHECK-LABEL: func.func @all_to_all_multi_role(%x: tensor<?xi64>) -> tensor<?xi64> {
// CHECK-NEXT:    %y = coll.all_to_all %x on #coll.group<[0]> role #coll.role<input_splits, input_lengths, input_indices> splits #coll.splits<{{\[\[}}5]]> : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:    func.return %y : tensor<?xi64>
// CHECK-NEXT:  }
func.func @all_to_all_multi_role(%x: tensor<?xi64>) -> tensor<?xi64> {
  %y = coll.all_to_all %x on #coll.group<[0]> role #coll.role<input_splits, input_lengths, input_indices> splits #coll.splits<[[5]]> : tensor<?xi64> -> tensor<?xi64>
  func.return %y : tensor<?xi64>
}

// The asynchronous form with static splits, waited on once.
// CHECK-LABEL: func.func @all_to_all_start_static(%x: tensor<?xf32>) -> tensor<?xf32> {
// CHECK-NEXT:    %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<grad_pooled> splits #coll.splits<{{\[\[}}8, 8], [8, 8]]> : tensor<?xf32> -> !coll.handle<tensor<?xf32>>
// CHECK-NEXT:    %y = coll.wait %h : !coll.handle<tensor<?xf32>> -> tensor<?xf32>
// CHECK-NEXT:    func.return %y : tensor<?xf32>
// CHECK-NEXT:  }
func.func @all_to_all_start_static(%x: tensor<?xf32>) -> tensor<?xf32> {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<grad_pooled> splits #coll.splits<[[8, 8], [8, 8]]> : tensor<?xf32> -> !coll.handle<tensor<?xf32>>
  %y = coll.wait %h : !coll.handle<tensor<?xf32>> -> tensor<?xf32>
  func.return %y : tensor<?xf32>
}

// The asynchronous form with dynamic splits: the handle carries both results.
// CHECK-LABEL: func.func @all_to_all_start_dynamic(%x: tensor<?xi64>, %s: tensor<2xi64>) -> (tensor<?xi64>, tensor<2xi64>) {
// CHECK-NEXT:    %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%s : tensor<2xi64>) : tensor<?xi64> -> !coll.handle<tensor<?xi64>, tensor<2xi64>>
// CHECK-NEXT:    %y, %r = coll.wait %h : !coll.handle<tensor<?xi64>, tensor<2xi64>> -> tensor<?xi64>, tensor<2xi64>
// CHECK-NEXT:    func.return %y, %r : tensor<?xi64>, tensor<2xi64>
// CHECK-NEXT:  }
func.func @all_to_all_start_dynamic(%x: tensor<?xi64>, %s: tensor<2xi64>) -> (tensor<?xi64>, tensor<2xi64>) {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%s : tensor<2xi64>) : tensor<?xi64> -> !coll.handle<tensor<?xi64>, tensor<2xi64>>
  %y, %r = coll.wait %h : !coll.handle<tensor<?xi64>, tensor<2xi64>> -> tensor<?xi64>, tensor<2xi64>
  func.return %y, %r : tensor<?xi64>, tensor<2xi64>
}

// The asynchronous all-reduce: one aggregated reduction, results through the wait.
// CHECK-LABEL: func.func @all_reduce_start(%g: tensor<8x4xf32>, %h: tensor<16xf32>) -> (tensor<8x4xf32>, tensor<16xf32>) {
// CHECK-NEXT:    %t = coll.all_reduce_start %g, %h on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<8x4xf32>, tensor<16xf32> -> !coll.handle<tensor<8x4xf32>, tensor<16xf32>>
// CHECK-NEXT:    %a, %b = coll.wait %t : !coll.handle<tensor<8x4xf32>, tensor<16xf32>> -> tensor<8x4xf32>, tensor<16xf32>
// CHECK-NEXT:    func.return %a, %b : tensor<8x4xf32>, tensor<16xf32>
// CHECK-NEXT:  }
func.func @all_reduce_start(%g: tensor<8x4xf32>, %h: tensor<16xf32>) -> (tensor<8x4xf32>, tensor<16xf32>) {
  %t = coll.all_reduce_start %g, %h on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<8x4xf32>, tensor<16xf32> -> !coll.handle<tensor<8x4xf32>, tensor<16xf32>>
  %a, %b = coll.wait %t : !coll.handle<tensor<8x4xf32>, tensor<16xf32>> -> tensor<8x4xf32>, tensor<16xf32>
  func.return %a, %b : tensor<8x4xf32>, tensor<16xf32>
}

// all_reduce with both reductions.
// CHECK-LABEL: func.func @all_reduce(%g: tensor<1024xf32>, %s: tensor<?x16xf16>) -> (tensor<1024xf32>, tensor<?x16xf16>) {
// CHECK-NEXT:    %a = coll.all_reduce %g on #coll.group<[0, 1, 2, 3]> role #coll.role<dense_grad> reduce "sum" : tensor<1024xf32> -> tensor<1024xf32>
// CHECK-NEXT:    %b = coll.all_reduce %s on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "mean" : tensor<?x16xf16> -> tensor<?x16xf16>
// CHECK-NEXT:    func.return %a, %b : tensor<1024xf32>, tensor<?x16xf16>
// CHECK-NEXT:  }
func.func @all_reduce(%g: tensor<1024xf32>, %s: tensor<?x16xf16>) -> (tensor<1024xf32>, tensor<?x16xf16>) {
  %a = coll.all_reduce %g on #coll.group<[0, 1, 2, 3]> role #coll.role<dense_grad> reduce "sum" : tensor<1024xf32> -> tensor<1024xf32>
  %b = coll.all_reduce %s on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "mean" : tensor<?x16xf16> -> tensor<?x16xf16>
  func.return %a, %b : tensor<1024xf32>, tensor<?x16xf16>
}

// A replicated table's gradient riding in the dense gradients' all-reduce (`with_dense_grads`).
// CHECK-LABEL: func.func @all_reduce_with_dense_grads(%g: tensor<10x4xf32>) {
// CHECK-NEXT:    %r = coll.all_reduce %g on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" with_dense_grads : tensor<10x4xf32> -> tensor<10x4xf32>
func.func @all_reduce_with_dense_grads(%g: tensor<10x4xf32>) {
  %r = coll.all_reduce %g on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" with_dense_grads : tensor<10x4xf32> -> tensor<10x4xf32>
  func.return
}

// reduce_scatter: dim 0 of the input is the group size times dim 0 of the result.
// CHECK-LABEL: func.func @reduce_scatter(%g: tensor<8x16xf32>, %h: tensor<?x4xbf16>) -> (tensor<4x16xf32>, tensor<?x4xbf16>) {
// CHECK-NEXT:    %a = coll.reduce_scatter %g on #coll.group<[0, 1]> role #coll.role<grad_pooled> reduce "sum" : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK-NEXT:    %b = coll.reduce_scatter %h on #coll.group<[0, 1, 2]> role #coll.role<dense_grad> reduce "mean" : tensor<?x4xbf16> -> tensor<?x4xbf16>
// CHECK-NEXT:    func.return %a, %b : tensor<4x16xf32>, tensor<?x4xbf16>
// CHECK-NEXT:  }
func.func @reduce_scatter(%g: tensor<8x16xf32>, %h: tensor<?x4xbf16>) -> (tensor<4x16xf32>, tensor<?x4xbf16>) {
  %a = coll.reduce_scatter %g on #coll.group<[0, 1]> role #coll.role<grad_pooled> reduce "sum" : tensor<8x16xf32> -> tensor<4x16xf32>
  %b = coll.reduce_scatter %h on #coll.group<[0, 1, 2]> role #coll.role<dense_grad> reduce "mean" : tensor<?x4xbf16> -> tensor<?x4xbf16>
  func.return %a, %b : tensor<4x16xf32>, tensor<?x4xbf16>
}

// Collectives over a sub-group of a step's world.
// CHECK-LABEL: sched.step @collectives_in_step world_size = 4 outputs = 1 {
// CHECK-NEXT:  ^bb0(%x: tensor<?xi32>, %g: tensor<64xf32>):
// CHECK-NEXT:    %y = coll.all_to_all %x on #coll.group<[1, 3]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}2, 2], [2, 2]]> : tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    %r = coll.all_reduce %g on #coll.group<[3, 2, 1, 0]> role #coll.role<dense_grad> reduce "sum" : tensor<64xf32> -> tensor<64xf32>
// CHECK-NEXT:    sched.yield %y, %r : tensor<?xi32>, tensor<64xf32>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%gy: tensor<?xi32>, %sr: tensor<64xf32>):
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  }
sched.step @collectives_in_step world_size = 4 outputs = 1 {
^bb0(%x: tensor<?xi32>, %g: tensor<64xf32>):
  %y = coll.all_to_all %x on #coll.group<[1, 3]> role #coll.role<input_lengths> splits #coll.splits<[[2, 2], [2, 2]]> : tensor<?xi32> -> tensor<?xi32>
  %r = coll.all_reduce %g on #coll.group<[3, 2, 1, 0]> role #coll.role<dense_grad> reduce "sum" : tensor<64xf32> -> tensor<64xf32>
  sched.yield %y, %r : tensor<?xi32>, tensor<64xf32>
} backward {
^bb1(%gy: tensor<?xi32>, %sr: tensor<64xf32>):
  sched.yield
}
