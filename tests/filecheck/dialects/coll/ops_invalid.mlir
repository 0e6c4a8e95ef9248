// RUN: sparselift-opt %s --split-input-file --verify-diagnostics | filecheck %s

//===----------------------------------------------------------------------===//
// #coll.group / #coll.role / #coll.splits
//===----------------------------------------------------------------------===//

// A group has at least one rank.
// CHECK: a collective group needs at least one rank
func.func @group_empty(%x: tensor<?xf32>) -> tensor<?xf32> {
  %y = coll.all_reduce %x on #coll.group<[]> role #coll.role<dense_grad> reduce "sum" : tensor<?xf32> -> tensor<?xf32>
  func.return %y : tensor<?xf32>
}

// -----

// Group ranks are non-negative.
// CHECK: group ranks must be non-negative, got [0, -1]
func.func @group_negative_rank() attributes {g = #coll.group<[0, -1]>} {
  func.return
}

// -----

// A rank appears once in a group.
// CHECK: a rank appears twice in group [0, 1, 0]
func.func @group_rank_twice() attributes {g = #coll.group<[0, 1, 0]>} {
  func.return
}

// -----

// Unknown role.
// CHECK: unknown collective role 'input_ids'; expected one of input_splits, input_lengths, input_indices, input_weights, input_packed, output_pooled, grad_pooled, output_rows, grad_rows, dense_grad, sparse_grad
func.func @role_unknown() attributes {r = #coll.role<input_ids>} {
  func.return
}

// -----

// A role is listed once.
// CHECK: role listed twice in ['input_lengths', 'input_indices', 'input_lengths']
func.func @role_twice() attributes {r = #coll.role<input_lengths, input_indices, input_lengths>} {
  func.return
}

// -----

// Split sizes are non-negative.
// CHECK: all-to-all split sizes must be non-negative
func.func @splits_negative(%x: tensor<?xi32>) -> tensor<?xi32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, -1], [1, 1]]> : tensor<?xi32> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

// A role invalid for the operand type: input_indices on f32 data.
// CHECK: coll.all_to_all: role 'input_indices' needs integer data, got f32
func.func @role_indices_on_f32(%x: tensor<?xf32>) -> tensor<?xf32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_indices> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xf32> -> tensor<?xf32>
  func.return %y : tensor<?xf32>
}

// -----

// Unpooled rows are float data too.
// CHECK: coll.all_to_all: role 'output_rows' needs float data, got i64
func.func @role_rows_on_i64(%x: tensor<?xi64>) -> tensor<?xi64> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<output_rows> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi64> -> tensor<?xi64>
  func.return %y : tensor<?xi64>
}

// -----

// A role invalid for the operand type: output_pooled on i64 data.
// CHECK: coll.all_to_all: role 'output_pooled' needs float data, got i64
func.func @role_pooled_on_i64(%x: tensor<?xi64>) -> tensor<?xi64> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi64> -> tensor<?xi64>
  func.return %y : tensor<?xi64>
}

// -----

// Every role of an aggregated collective fits the data.
// CHECK: coll.all_to_all_start: role 'input_weights' needs float data, got i32
func.func @role_aggregated_mismatch(%x: tensor<?xi32>) -> tensor<?xi32> {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_lengths, input_weights> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32> -> !coll.handle<tensor<?xi32>>
  %y = coll.wait %h : !coll.handle<tensor<?xi32>> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

//===----------------------------------------------------------------------===//
// coll.all_to_all / coll.all_to_all_start
//===----------------------------------------------------------------------===//

// A group rank out of range for the step's world_size.
// CHECK: coll.all_to_all: group rank 2 is out of range for world size 2
sched.step @a2a_rank_out_of_world world_size = 2 outputs = 1 {
^bb0(%x: tensor<?xi32>):
  %y = coll.all_to_all %x on #coll.group<[0, 2]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32> -> tensor<?xi32>
  sched.yield %y : tensor<?xi32>
} backward {
^bb1(%g: tensor<?xi32>):
  sched.yield
}

// -----

// One input, or one per group rank.
// CHECK: coll.all_to_all: expected one input or one per group rank (2), got 3
func.func @a2a_input_count(%x: tensor<?xi32>) -> tensor<?xi32> {
  %y = coll.all_to_all %x, %x, %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

// The exchange keeps the element type.
// CHECK: coll.all_to_all: input element type i32 differs from result i64
func.func @a2a_element_type(%x: tensor<?xi32>) -> tensor<?xi64> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32> -> tensor<?xi64>
  func.return %y : tensor<?xi64>
}

// -----

// all-to-all buffers are 1-D.
// CHECK: coll.all_to_all: all-to-all buffers are 1-D, got tensor<?x16xf32>
func.func @a2a_2d_input(%x: tensor<?x16xf32>) -> tensor<?xf32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?x16xf32> -> tensor<?xf32>
  func.return %y : tensor<?xf32>
}

// -----

// Either static splits or send_splits: neither.
// CHECK: coll.all_to_all: give either static splits or send_splits, not both or neither
func.func @a2a_no_splits(%x: tensor<?xi32>) -> tensor<?xi32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> : tensor<?xi32> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

// Either static splits or send_splits: both.
// CHECK: coll.all_to_all_start: give either static splits or send_splits, not both or neither
func.func @a2a_both_splits(%x: tensor<?xi64>, %s: tensor<2xi64>) -> (tensor<?xi64>, tensor<2xi64>) {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_indices> splits #coll.splits<[[1, 1], [1, 1]]> send_splits(%s : tensor<2xi64>) : tensor<?xi64> -> !coll.handle<tensor<?xi64>, tensor<2xi64>>
  %y, %r = coll.wait %h : !coll.handle<tensor<?xi64>, tensor<2xi64>> -> tensor<?xi64>, tensor<2xi64>
  func.return %y, %r : tensor<?xi64>, tensor<2xi64>
}

// -----

// Static splits are group-size square.
// CHECK: coll.all_to_all: splits are 3x3 but the group has 2 ranks
func.func @a2a_splits_size(%x: tensor<?xi32>) -> tensor<?xi32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1, 1], [1, 1, 1], [1, 1, 1]]> : tensor<?xi32> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

// recv_splits only go with send_splits.
// CHECK: coll.all_to_all: recv_splits only go with dynamic send_splits
func.func @a2a_recv_with_static(%x: tensor<?xi32>, %r: tensor<2xi64>) -> tensor<?xi32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> recv_splits(%r : tensor<2xi64>) : tensor<?xi32> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

// send_splits are 1-D integers.
// CHECK: coll.all_to_all: send_splits must be a 1-D integer tensor, got tensor<2xf32>
func.func @a2a_float_send_splits(%x: tensor<?xi64>, %s: tensor<2xf32>) -> (tensor<?xi64>, tensor<2xi64>) {
  %y, %r = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%s : tensor<2xf32>) : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  func.return %y, %r : tensor<?xi64>, tensor<2xi64>
}

// -----

// recv_splits are 1-D integers.
// CHECK: coll.all_to_all: recv_splits must be a 1-D integer tensor, got tensor<2x1xi64>
func.func @a2a_2d_recv_splits(%x: tensor<?xi64>, %s: tensor<2xi64>, %rs: tensor<2x1xi64>) -> (tensor<?xi64>, tensor<2xi64>) {
  %y, %r = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%s : tensor<2xi64>) recv_splits(%rs : tensor<2x1xi64>) : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  func.return %y, %r : tensor<?xi64>, tensor<2xi64>
}

// -----

// send_splits have one entry per group rank.
// CHECK: coll.all_to_all: send_splits needs one entry per group rank (2), got tensor<4xi64>
func.func @a2a_send_splits_size(%x: tensor<?xi64>, %s: tensor<4xi64>) -> (tensor<?xi64>, tensor<2xi64>) {
  %y, %r = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%s : tensor<4xi64>) : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  func.return %y, %r : tensor<?xi64>, tensor<2xi64>
}

// -----

// With send_splits the received split sizes are a second result.
// CHECK: coll.all_to_all: expected 2 results (the data and the received splits)
func.func @a2a_dynamic_one_result(%x: tensor<?xi64>, %s: tensor<2xi64>) -> tensor<?xi64> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%s : tensor<2xi64>) : tensor<?xi64> -> tensor<?xi64>
  func.return %y : tensor<?xi64>
}

// -----

// With static splits there is one result.
// CHECK: coll.all_to_all_start: expected 1 results (the data)
func.func @a2a_start_static_two_results(%x: tensor<?xi64>) -> (tensor<?xi64>, tensor<2xi64>) {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_indices> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi64> -> !coll.handle<tensor<?xi64>, tensor<2xi64>>
  %y, %r = coll.wait %h : !coll.handle<tensor<?xi64>, tensor<2xi64>> -> tensor<?xi64>, tensor<2xi64>
  func.return %y, %r : tensor<?xi64>, tensor<2xi64>
}

// -----

// No result at all (generic form; used to crash the verifier with an IndexError).
// CHECK: coll.all_to_all: expected 1 results (the data)
func.func @a2a_no_result(%x: tensor<?xi32>) {
  "coll.all_to_all"(%x) <{group = #coll.group<[0, 1]>, role = #coll.role<input_lengths>, splits = #coll.splits<[[1, 1], [1, 1]]>, operandSegmentSizes = array<i32: 1, 0, 0>}> : (tensor<?xi32>) -> ()
  func.return
}

// -----

// The handle's data type is a tensor.
// CHECK: coll.all_to_all_start result must be a tensor, got i32
func.func @a2a_start_non_tensor_handle(%x: tensor<?xi32>) -> i32 {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32> -> !coll.handle<i32>
  %y = "coll.wait"(%h) : (!coll.handle<i32>) -> i32
  func.return %y : i32
}

// -----

// A handle that is never waited on.
// CHECK: coll.all_to_all_start: its handle must be waited on exactly once, found 0 uses
func.func @start_never_waited(%x: tensor<?xi32>) {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32> -> !coll.handle<tensor<?xi32>>
  func.return
}

// -----

// A handle waited on twice.
// CHECK: coll.all_to_all_start: its handle must be waited on exactly once, found 2 uses
func.func @start_waited_twice(%x: tensor<?xi32>) -> (tensor<?xi32>, tensor<?xi32>) {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32> -> !coll.handle<tensor<?xi32>>
  %a = coll.wait %h : !coll.handle<tensor<?xi32>> -> tensor<?xi32>
  %b = coll.wait %h : !coll.handle<tensor<?xi32>> -> tensor<?xi32>
  func.return %a, %b : tensor<?xi32>, tensor<?xi32>
}

// -----

// A handle may only be used by coll.wait.
// CHECK: coll.all_to_all_start: its handle may only be used by coll.wait
func.func @start_handle_escapes(%x: tensor<?xi32>) -> !coll.handle<tensor<?xi32>> {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32> -> !coll.handle<tensor<?xi32>>
  func.return %h : !coll.handle<tensor<?xi32>>
}

// -----

//===----------------------------------------------------------------------===//
// coll.wait
//===----------------------------------------------------------------------===//

// wait returns exactly the handle's types.
// CHECK: coll.wait: results ['tensor<?xi64>'] do not match handle ['tensor<?xi64>', 'tensor<2xi64>']
func.func @wait_result_types(%x: tensor<?xi64>, %s: tensor<2xi64>) -> tensor<?xi64> {
  %h = coll.all_to_all_start %x on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%s : tensor<2xi64>) : tensor<?xi64> -> !coll.handle<tensor<?xi64>, tensor<2xi64>>
  %y = coll.wait %h : !coll.handle<tensor<?xi64>, tensor<2xi64>> -> tensor<?xi64>
  func.return %y : tensor<?xi64>
}

// -----

// The handle comes from a start op (not a block argument).
// CHECK: coll.wait: the handle must come from a collective start op
func.func @wait_on_argument(%h: !coll.handle<tensor<?xi32>>) -> tensor<?xi32> {
  %y = coll.wait %h : !coll.handle<tensor<?xi32>> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

//===----------------------------------------------------------------------===//
// coll.all_reduce / coll.reduce_scatter
//===----------------------------------------------------------------------===//

// A group rank out of range for the step's world_size.
// CHECK: coll.all_reduce: group rank 3 is out of range for world size 2
sched.step @all_reduce_rank_out_of_world world_size = 2 outputs = 1 {
^bb0(%x: tensor<64xf32>):
  %y = coll.all_reduce %x on #coll.group<[0, 3]> role #coll.role<dense_grad> reduce "sum" : tensor<64xf32> -> tensor<64xf32>
  sched.yield %y : tensor<64xf32>
} backward {
^bb1(%g: tensor<64xf32>):
  sched.yield
}

// -----

// Only sum and mean reductions.
// CHECK: coll.all_reduce: unknown reduction 'max'; expected one of sum, mean
func.func @all_reduce_unknown_reduction(%x: tensor<64xf32>) -> tensor<64xf32> {
  %y = coll.all_reduce %x on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "max" : tensor<64xf32> -> tensor<64xf32>
  func.return %y : tensor<64xf32>
}

// -----

// A reduction keeps the element type.
// CHECK: coll.reduce_scatter: input and result element types differ
func.func @reduce_scatter_element_type(%x: tensor<8xf32>) -> tensor<4xf16> {
  %y = coll.reduce_scatter %x on #coll.group<[0, 1]> role #coll.role<grad_pooled> reduce "sum" : tensor<8xf32> -> tensor<4xf16>
  func.return %y : tensor<4xf16>
}

// -----

// with_dense_grads is for replicated tables' gradients: role sparse_grad, a sum.
// CHECK: coll.all_reduce: with_dense_grads needs role sparse_grad and reduction sum (replicated tables' gradients), got role dense_grad and reduction sum
func.func @with_dense_grads_role(%x: tensor<64xf32>) {
  %y = coll.all_reduce %x on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" with_dense_grads : tensor<64xf32> -> tensor<64xf32>
  func.return
}

// -----

// CHECK: coll.all_reduce: with_dense_grads needs role sparse_grad and reduction sum (replicated tables' gradients), got role sparse_grad and reduction mean
func.func @with_dense_grads_mean(%x: tensor<64xf32>) {
  %y = coll.all_reduce %x on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "mean" with_dense_grads : tensor<64xf32> -> tensor<64xf32>
  func.return
}

// -----

// Its sums exist only after backward: only table updates may read them.
// CHECK: coll.all_reduce: with_dense_grads results are ready only after backward; they may feed only sparse.lookup_update, not func.return
func.func @with_dense_grads_read_elsewhere(%x: tensor<64xf32>) -> tensor<64xf32> {
  %y = coll.all_reduce %x on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" with_dense_grads : tensor<64xf32> -> tensor<64xf32>
  func.return %y : tensor<64xf32>
}

// -----

// A role invalid for the operand type: input_lengths on f32 data.
// CHECK: coll.all_reduce: role 'input_lengths' needs integer data, got f32
func.func @all_reduce_role(%x: tensor<64xf32>) -> tensor<64xf32> {
  %y = coll.all_reduce %x on #coll.group<[0, 1]> role #coll.role<input_lengths> reduce "sum" : tensor<64xf32> -> tensor<64xf32>
  func.return %y : tensor<64xf32>
}

// -----

// A role invalid for the operand type: sparse_grad on i64 data.
// CHECK: coll.reduce_scatter: role 'sparse_grad' needs float data, got i64
func.func @reduce_scatter_role(%x: tensor<8xi64>) -> tensor<4xi64> {
  %y = coll.reduce_scatter %x on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<8xi64> -> tensor<4xi64>
  func.return %y : tensor<4xi64>
}

// -----

// all_reduce keeps the type.
// CHECK: coll.all_reduce: result type must equal input type
func.func @all_reduce_shape(%x: tensor<64xf32>) -> tensor<32xf32> {
  %y = coll.all_reduce %x on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "mean" : tensor<64xf32> -> tensor<32xf32>
  func.return %y : tensor<32xf32>
}

// -----

// reduce_scatter keeps the rank.
// CHECK: coll.reduce_scatter: input and result ranks differ
func.func @reduce_scatter_rank(%x: tensor<8x4xf32>) -> tensor<16xf32> {
  %y = coll.reduce_scatter %x on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<8x4xf32> -> tensor<16xf32>
  func.return %y : tensor<16xf32>
}

// -----

// reduce_scatter only changes dim 0.
// CHECK: coll.reduce_scatter: only dim 0 may change
func.func @reduce_scatter_inner_dim(%x: tensor<8x4xf32>) -> tensor<4x8xf32> {
  %y = coll.reduce_scatter %x on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<8x4xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// -----

// reduce_scatter needs a dim 0 (0-D tensors used to crash the verifier with an IndexError).
// CHECK: coll.reduce_scatter: input and result must have a dim 0 to scatter
func.func @reduce_scatter_0d(%x: tensor<f32>) -> tensor<f32> {
  %y = coll.reduce_scatter %x on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<f32> -> tensor<f32>
  func.return %y : tensor<f32>
}

// -----

// reduce_scatter divides dim 0 by the group size.
// CHECK: coll.reduce_scatter: dim 0 of the input (8) must be the group size (4) times dim 0 of the result (4)
func.func @reduce_scatter_dim0(%x: tensor<8x4xf32>) -> tensor<4x4xf32> {
  %y = coll.reduce_scatter %x on #coll.group<[0, 1, 2, 3]> role #coll.role<dense_grad> reduce "sum" : tensor<8x4xf32> -> tensor<4x4xf32>
  func.return %y : tensor<4x4xf32>
}

// -----

// coll.all_reduce_start: the handle's types must match the operands.
// CHECK: coll.all_reduce_start: result type must equal input type
func.func @all_reduce_start_type_mismatch(%g: tensor<16xf32>) -> tensor<8xf32> {
  %t = coll.all_reduce_start %g on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<16xf32> -> !coll.handle<tensor<8xf32>>
  %a = coll.wait %t : !coll.handle<tensor<8xf32>> -> tensor<8xf32>
  func.return %a : tensor<8xf32>
}

// -----

// coll.all_reduce_start: a handle never waited on leaks an in-flight buffer.
// CHECK: coll.all_reduce_start: its handle must be waited on exactly once, found 0 uses
func.func @all_reduce_start_never_waited(%g: tensor<16xf32>) {
  %t = coll.all_reduce_start %g on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<16xf32> -> !coll.handle<tensor<16xf32>>
  func.return
}

// -----

// coll.all_reduce_start: an unknown reduction.
// CHECK: coll.all_reduce_start: unknown reduction 'max'; expected one of sum, mean
func.func @all_reduce_start_bad_reduction(%g: tensor<16xf32>) -> tensor<16xf32> {
  %t = coll.all_reduce_start %g on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "max" : tensor<16xf32> -> !coll.handle<tensor<16xf32>>
  %a = coll.wait %t : !coll.handle<tensor<16xf32>> -> tensor<16xf32>
  func.return %a : tensor<16xf32>
}

// -----

//===----------------------------------------------------------------------===//
// References to the enclosing sched.step: routed segment counts, packed segments, group labels
//===----------------------------------------------------------------------===//

// The lengths exchange sends each peer the features the route serves there (f0 and f1 on rank 1).
// CHECK: coll.all_to_all: splits row 0 is [1, 1], but the sparse.route of group 'g' sends [0, 2] features per sample to ranks 0..1
sched.step @lengths_splits_differ world_size = 2 outputs = 0 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// A packed input holds one segment per group rank.
// CHECK: coll.all_to_all: input 0 is packed in 1 segment but the group has 2 ranks
sched.step @packed_segments_differ world_size = 2 outputs = 1 {
^bb0(%a: tensor<?x4xf32>):
  %b = sparse.pack %a layout = #sparse.layout<[[0 : 4]]> : tensor<?x4xf32> -> tensor<?xf32>
  %r = coll.all_to_all %b on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[4, 4], [4, 4]]> : tensor<?xf32> -> tensor<?xf32>
  sched.yield %r : tensor<?xf32>
} backward {
^bb1(%g: tensor<?xf32>):
  sched.yield
}

// -----

// Row i of the splits is what input i packs per segment.
// CHECK: coll.all_to_all_start: splits row 1 is [8, 8] but input 1 (sparse.pack) holds [12, 12] elements per sample per segment
sched.step @packed_widths_differ world_size = 2 outputs = 1 {
^bb0(%a: tensor<?x8xf32>, %c: tensor<?x12xf32>):
  %b0 = sparse.pack %a layout = #sparse.layout<[[0 : 8], [0 : 8]]> on_rank 0 : tensor<?x8xf32> -> tensor<?xf32>
  %b1 = sparse.pack %c layout = #sparse.layout<[[0 : 12], [0 : 12]]> on_rank 1 : tensor<?x12xf32> -> tensor<?xf32>
  %h = coll.all_to_all_start %b0, %b1 on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[8, 8], [8, 8]]> : tensor<?xf32>, tensor<?xf32> -> !coll.handle<tensor<?xf32>>
  %r = coll.wait %h : !coll.handle<tensor<?xf32>> -> tensor<?xf32>
  sched.yield %r : tensor<?xf32>
} backward {
^bb1(%g: tensor<?xf32>):
  sched.yield
}

// -----

// A collective's group label names a sharding group that a route of the step defines.
// CHECK: coll.all_reduce: group 'g2' is not a sharding group of @collective_group_label (its routes define 'g')
sched.step @collective_group_label world_size = 2 outputs = 0 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %d: tensor<8xf32>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %r = coll.all_reduce %d on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "g2"} : tensor<8xf32> -> tensor<8xf32>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// A reduce-scatter of a packed buffer scatters one segment to each group rank.
// CHECK: coll.reduce_scatter: its input is packed in 1 segment but the group has 2 ranks
sched.step @reduce_scatter_segments_differ world_size = 2 outputs = 1 {
^bb0(%a: tensor<?x4xf32>):
  %b = sparse.pack %a layout = #sparse.layout<[[0 : 4]]> : tensor<?x4xf32> -> tensor<?xf32>
  %r = coll.reduce_scatter %b on #coll.group<[0, 1]> role #coll.role<output_pooled> reduce "sum" : tensor<?xf32> -> tensor<?xf32>
  sched.yield %r : tensor<?xf32>
} backward {
^bb1(%g: tensor<?xf32>):
  sched.yield
}
