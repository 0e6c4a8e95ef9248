// RUN: sparselift-opt %s --split-input-file -p canonicalize | filecheck %s

// An all-to-all over a one-rank group moves nothing and folds away.
// CHECK-LABEL: sched.step @single_rank_all_to_all
// CHECK-NOT:     coll.all_to_all
// CHECK:         sched.yield %x : tensor<?xi32>
sched.step @single_rank_all_to_all world_size = 1 outputs = 1 {
^bb0(%x: tensor<?xi32>):
  %y = coll.all_to_all %x on #coll.group<[0]> role #coll.role<input_lengths> splits #coll.splits<[[4]]> : tensor<?xi32> -> tensor<?xi32>
  sched.yield %y : tensor<?xi32>
} backward {
^bb0(%g: tensor<?xi32>):
  sched.yield
}

// -----

// An all-to-all over a one-rank group folds outside a step too.
// CHECK-LABEL: func.func @single_rank_all_to_all_func
// CHECK-NEXT:    func.return %x : tensor<?xf32>
func.func @single_rank_all_to_all_func(%x: tensor<?xf32>) -> tensor<?xf32> {
  %y = coll.all_to_all %x on #coll.group<[3]> role #coll.role<output_pooled> splits #coll.splits<[[16]]> : tensor<?xf32> -> tensor<?xf32>
  func.return %y : tensor<?xf32>
}

// -----

// An all-reduce over a one-rank group folds away.
// CHECK-LABEL: sched.step @single_rank_all_reduce
// CHECK-NOT:     coll.all_reduce
// CHECK:         sched.yield %g : tensor<1024xf32>
sched.step @single_rank_all_reduce world_size = 1 outputs = 1 {
^bb0(%g: tensor<1024xf32>):
  %r = coll.all_reduce %g on #coll.group<[0]> role #coll.role<dense_grad> reduce "mean" : tensor<1024xf32> -> tensor<1024xf32>
  sched.yield %r : tensor<1024xf32>
} backward {
^bb1(%gr: tensor<1024xf32>):
  sched.yield
}

// -----

// A reduce-scatter over a one-rank group folds away.
// CHECK-LABEL: func.func @single_rank_reduce_scatter
// CHECK-NEXT:    func.return %g : tensor<8x16xf32>
func.func @single_rank_reduce_scatter(%g: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %r = coll.reduce_scatter %g on #coll.group<[0]> role #coll.role<grad_pooled> reduce "sum" : tensor<8x16xf32> -> tensor<8x16xf32>
  func.return %r : tensor<8x16xf32>
}

// -----

// A single-member, single-segment pack is the identity.
// CHECK-LABEL: func.func @single_member_pack
// CHECK-NEXT:    func.return %x : tensor<?xi64>
func.func @single_member_pack(%x: tensor<?xi64>) -> tensor<?xi64> {
  %b = sparse.pack %x layout = #sparse.layout<[[? : ?]]> : tensor<?xi64> -> tensor<?xi64>
  func.return %b : tensor<?xi64>
}

// -----

// A single-member, single-segment unpack is the identity.
// CHECK-LABEL: func.func @single_member_unpack
// CHECK-NEXT:    func.return %b : tensor<?xf32>
func.func @single_member_unpack(%b: tensor<?xf32>) -> tensor<?xf32> {
  %x = sparse.unpack %b layout = #sparse.layout<[[? : ?]]> : tensor<?xf32> -> tensor<?xf32>
  func.return %x : tensor<?xf32>
}

// -----

// unpack(pack(x)) with the same layout is x (the dead pack is removed too).
// CHECK-LABEL: func.func @unpack_of_pack
// CHECK-NEXT:    func.return %x, %y, %z : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?xf32>
func.func @unpack_of_pack(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>, %z: tensor<?xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?xf32>) {
  %b = sparse.pack %x, %y, %z layout = #sparse.layout<[[0 : 16, 16 : 8, ? : ?], [0 : 16, 0 : 0, ? : ?]]> : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?xf32> -> tensor<?xf32>
  %u:3 = sparse.unpack %b layout = #sparse.layout<[[0 : 16, 16 : 8, ? : ?], [0 : 16, 0 : 0, ? : ?]]> : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>, tensor<?xf32>
  func.return %u#0, %u#1, %u#2 : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?xf32>
}

// -----

// unpack(pack(x)) on the same rank is x.
// CHECK-LABEL: func.func @unpack_of_pack_same_rank
// CHECK-NEXT:    func.return %x, %y : tensor<?x16xf32>, tensor<?x8xf32>
func.func @unpack_of_pack_same_rank(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8], [8 : 16, 0 : 8]]> on_rank 1 : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  %u:2 = sparse.unpack %b layout = #sparse.layout<[[0 : 16, 16 : 8], [8 : 16, 0 : 8]]> on_rank 1 : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  func.return %u#0, %u#1 : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// The folds compose through a step: single-rank exchange of a packed buffer disappears.
// CHECK-LABEL: sched.step @pack_exchange_unpack
// CHECK-NEXT:  ^bb0(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>):
// CHECK-NEXT:    sched.yield %x, %y : tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:  } backward {
sched.step @pack_exchange_unpack world_size = 1 outputs = 2 {
^bb0(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>):
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  %r = coll.all_to_all %b on #coll.group<[0]> role #coll.role<output_pooled> splits #coll.splits<[[24]]> : tensor<?xf32> -> tensor<?xf32>
  %u:2 = sparse.unpack %r layout = #sparse.layout<[[0 : 16, 16 : 8]]> : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  sched.yield %u#0, %u#1 : tensor<?x16xf32>, tensor<?x8xf32>
} backward {
^bb1(%gx: tensor<?x16xf32>, %gy: tensor<?x8xf32>):
  sched.yield
}

// -----

// NOT folded: a two-rank all-to-all moves data.
// CHECK-LABEL: func.func @two_rank_all_to_all
// CHECK-NEXT:    %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}1, 1], [1, 1]]> : tensor<?xi32> -> tensor<?xi32>
// CHECK-NEXT:    func.return %y : tensor<?xi32>
func.func @two_rank_all_to_all(%x: tensor<?xi32>) -> tensor<?xi32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> : tensor<?xi32> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

// NOT folded: a one-rank all-to-all with dynamic send_splits also produces the received splits.
// CHECK-LABEL: func.func @single_rank_dynamic_all_to_all
// CHECK-NEXT:    %y, %r = coll.all_to_all %x on #coll.group<[0]> role #coll.role<input_indices> send_splits(%s : tensor<1xi64>) : tensor<?xi64> -> tensor<?xi64>, tensor<1xi64>
// CHECK-NEXT:    func.return %y, %r : tensor<?xi64>, tensor<1xi64>
func.func @single_rank_dynamic_all_to_all(%x: tensor<?xi64>, %s: tensor<1xi64>) -> (tensor<?xi64>, tensor<1xi64>) {
  %y, %r = coll.all_to_all %x on #coll.group<[0]> role #coll.role<input_indices> send_splits(%s : tensor<1xi64>) : tensor<?xi64> -> tensor<?xi64>, tensor<1xi64>
  func.return %y, %r : tensor<?xi64>, tensor<1xi64>
}

// -----

// NOT folded: a one-rank all-to-all that refines the result type.
// CHECK-LABEL: func.func @single_rank_all_to_all_refines_type
// CHECK-NEXT:    %y = coll.all_to_all %x on #coll.group<[0]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}8]]> : tensor<?xi32> -> tensor<8xi32>
// CHECK-NEXT:    func.return %y : tensor<8xi32>
func.func @single_rank_all_to_all_refines_type(%x: tensor<?xi32>) -> tensor<8xi32> {
  %y = coll.all_to_all %x on #coll.group<[0]> role #coll.role<input_lengths> splits #coll.splits<[[8]]> : tensor<?xi32> -> tensor<8xi32>
  func.return %y : tensor<8xi32>
}

// -----

// NOT folded: the asynchronous form has no canonicalization (its handle has a wait).
// CHECK-LABEL: func.func @single_rank_all_to_all_start
// CHECK-NEXT:    %h = coll.all_to_all_start %x on #coll.group<[0]> role #coll.role<input_lengths> splits #coll.splits<{{\[\[}}1]]> : tensor<?xi32> -> !coll.handle<tensor<?xi32>>
// CHECK-NEXT:    %y = coll.wait %h : !coll.handle<tensor<?xi32>> -> tensor<?xi32>
// CHECK-NEXT:    func.return %y : tensor<?xi32>
func.func @single_rank_all_to_all_start(%x: tensor<?xi32>) -> tensor<?xi32> {
  %h = coll.all_to_all_start %x on #coll.group<[0]> role #coll.role<input_lengths> splits #coll.splits<[[1]]> : tensor<?xi32> -> !coll.handle<tensor<?xi32>>
  %y = coll.wait %h : !coll.handle<tensor<?xi32>> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

// NOT folded: a two-rank all-reduce.
// CHECK-LABEL: func.func @two_rank_all_reduce
// CHECK-NEXT:    %r = coll.all_reduce %g on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<64xf32> -> tensor<64xf32>
// CHECK-NEXT:    func.return %r : tensor<64xf32>
func.func @two_rank_all_reduce(%g: tensor<64xf32>) -> tensor<64xf32> {
  %r = coll.all_reduce %g on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<64xf32> -> tensor<64xf32>
  func.return %r : tensor<64xf32>
}

// -----

// NOT folded: a two-rank reduce-scatter.
// CHECK-LABEL: func.func @two_rank_reduce_scatter
// CHECK-NEXT:    %r = coll.reduce_scatter %g on #coll.group<[0, 1]> role #coll.role<grad_pooled> reduce "sum" : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK-NEXT:    func.return %r : tensor<4x16xf32>
func.func @two_rank_reduce_scatter(%g: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %r = coll.reduce_scatter %g on #coll.group<[0, 1]> role #coll.role<grad_pooled> reduce "sum" : tensor<8x16xf32> -> tensor<4x16xf32>
  func.return %r : tensor<4x16xf32>
}

// -----

// NOT folded: a one-rank reduce-scatter that refines the result type.
// CHECK-LABEL: func.func @single_rank_reduce_scatter_refines_type
// CHECK-NEXT:    %r = coll.reduce_scatter %g on #coll.group<[0]> role #coll.role<grad_pooled> reduce "sum" : tensor<?x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT:    func.return %r : tensor<8x16xf32>
func.func @single_rank_reduce_scatter_refines_type(%g: tensor<?x16xf32>) -> tensor<8x16xf32> {
  %r = coll.reduce_scatter %g on #coll.group<[0]> role #coll.role<grad_pooled> reduce "sum" : tensor<?x16xf32> -> tensor<8x16xf32>
  func.return %r : tensor<8x16xf32>
}

// -----

// NOT folded: a single-member pack with two segments lays the member out twice.
// CHECK-LABEL: func.func @pack_two_segments
// CHECK-NEXT:    %b = sparse.pack %x layout = #sparse.layout<{{\[\[}}? : ?], [? : ?]]> : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:    func.return %b : tensor<?xi64>
func.func @pack_two_segments(%x: tensor<?xi64>) -> tensor<?xi64> {
  %b = sparse.pack %x layout = #sparse.layout<[[? : ?], [? : ?]]> : tensor<?xi64> -> tensor<?xi64>
  func.return %b : tensor<?xi64>
}

// -----

// NOT folded: an unpack with two segments.
// CHECK-LABEL: func.func @unpack_two_segments
// CHECK-NEXT:    %x = sparse.unpack %b layout = #sparse.layout<{{\[\[}}? : ?], [? : ?]]> : tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:    func.return %x : tensor<?xf32>
func.func @unpack_two_segments(%b: tensor<?xf32>) -> tensor<?xf32> {
  %x = sparse.unpack %b layout = #sparse.layout<[[? : ?], [? : ?]]> : tensor<?xf32> -> tensor<?xf32>
  func.return %x : tensor<?xf32>
}

// -----

// NOT folded: a pack that widens i32 into an i64 buffer changes the element type.
// CHECK-LABEL: func.func @pack_widening
// CHECK-NEXT:    %b = sparse.pack %x layout = #sparse.layout<{{\[\[}}? : ?]]> : tensor<?xi32> -> tensor<?xi64>
// CHECK-NEXT:    func.return %b : tensor<?xi64>
func.func @pack_widening(%x: tensor<?xi32>) -> tensor<?xi64> {
  %b = sparse.pack %x layout = #sparse.layout<[[? : ?]]> : tensor<?xi32> -> tensor<?xi64>
  func.return %b : tensor<?xi64>
}

// -----

// NOT folded: packing a 2-D member flattens it.
// CHECK-LABEL: func.func @pack_2d_member
// CHECK-NEXT:    %b = sparse.pack %x layout = #sparse.layout<{{\[\[}}0 : 16]]> : tensor<?x16xf32> -> tensor<?xf32>
// CHECK-NEXT:    func.return %b : tensor<?xf32>
func.func @pack_2d_member(%x: tensor<?x16xf32>) -> tensor<?xf32> {
  %b = sparse.pack %x layout = #sparse.layout<[[0 : 16]]> : tensor<?x16xf32> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// NOT folded: a pack with two members.
// CHECK-LABEL: func.func @pack_two_members
// CHECK-NEXT:    %b = sparse.pack %x, %y layout = #sparse.layout<{{\[\[}}? : ?, ? : ?]]> : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:    func.return %b : tensor<?xi64>
func.func @pack_two_members(%x: tensor<?xi64>, %y: tensor<?xi64>) -> tensor<?xi64> {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[? : ?, ? : ?]]> : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
  func.return %b : tensor<?xi64>
}

// -----

// NOT folded: unpack of a pack with a different on_rank.
// CHECK-LABEL: func.func @unpack_of_pack_other_rank
// CHECK-NEXT:    %b = sparse.pack %x, %y layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 8]]> on_rank 0 : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
// CHECK-NEXT:    %u, %u_1 = sparse.unpack %b layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 8]]> on_rank 1 : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:    func.return %u, %u_1 : tensor<?x16xf32>, tensor<?x8xf32>
func.func @unpack_of_pack_other_rank(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8]]> on_rank 0 : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  %u:2 = sparse.unpack %b layout = #sparse.layout<[[0 : 16, 16 : 8]]> on_rank 1 : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  func.return %u#0, %u#1 : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// NOT folded: unpack pinned to a rank of a pack that is not.
// CHECK-LABEL: func.func @unpack_of_pack_rank_vs_none
// CHECK-NEXT:    %b = sparse.pack %x, %y layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 8]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
// CHECK-NEXT:    %u, %u_1 = sparse.unpack %b layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 8]]> on_rank 0 : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:    func.return %u, %u_1 : tensor<?x16xf32>, tensor<?x8xf32>
func.func @unpack_of_pack_rank_vs_none(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  %u:2 = sparse.unpack %b layout = #sparse.layout<[[0 : 16, 16 : 8]]> on_rank 0 : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  func.return %u#0, %u#1 : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// NOT folded: an unpack of a buffer that did not come from a pack.
// CHECK-LABEL: func.func @unpack_of_argument
// CHECK-NEXT:    %u, %u_1 = sparse.unpack %b layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 8]]> : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:    func.return %u, %u_1 : tensor<?x16xf32>, tensor<?x8xf32>
func.func @unpack_of_argument(%b: tensor<?xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %u:2 = sparse.unpack %b layout = #sparse.layout<[[0 : 16, 16 : 8]]> : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  func.return %u#0, %u#1 : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// A Pure op whose result is unused is removed by canonicalize; a collective (not Pure) stays.
// CHECK-LABEL: func.func @dead_ops
// CHECK-NEXT:    %r = coll.all_reduce %g on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<64xf32> -> tensor<64xf32>
// CHECK-NEXT:    func.return
func.func @dead_ops(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>, %g: tensor<64xf32>) {
  %p:2 = sparse.permute %x, %y order = [0, 1] : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  %r = coll.all_reduce %g on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<64xf32> -> tensor<64xf32>
  func.return
}
