// RUN: sparselift-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Ids exchanges are sized by their routes: no static sizes for them.
// CHECK: sparse.static_sizes: role input_lengths moves ids, whose exchanges are sized by their routes, not by static splits
func.func @ids_role() {
  %s, %r = sparse.static_sizes splits #coll.splits<[[1, 1], [1, 1]]> role #coll.role<input_lengths> : tensor<2xi64>, tensor<2xi64>
  func.return
}

// -----

// Sizes are element counts, one per rank of the splits.
// CHECK: sparse.static_sizes: result 1 needs one count per rank (2), got tensor<3xi64>
func.func @sizes_per_rank() {
  %s, %r = sparse.static_sizes splits #coll.splits<[[0, 0], [4, 4]]> role #coll.role<output_pooled> : tensor<2xi64>, tensor<3xi64>
  func.return
}

// -----

// CHECK: sparse.static_sizes: result 0 must be i64 element counts, got tensor<2xi32>
func.func @sizes_i64() {
  %s, %r = sparse.static_sizes splits #coll.splits<[[0, 0], [4, 4]]> role #coll.role<output_pooled> : tensor<2xi32>, tensor<2xi64>
  func.return
}

// -----

// Both members travel in one buffer: the same element type.
// CHECK: sparse.join_segments: second member has element type f16, the buffer f32
func.func @join_dtypes(%a: tensor<?xf32>, %b: tensor<?xf16>, %s: tensor<2xi64>) {
  %buf, %send, %recv = sparse.join_segments(%a) (%b) send(%s, %s) recv(%s, %s) : (tensor<?xf32>) (tensor<?xf16>), tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<2xi64>, tensor<2xi64>
  func.return
}

// -----

// A member is one value every rank sends, or one per rank of the step.
// CHECK: sparse.join_segments: second member needs one value or one per rank (2), got 3
sched.step @join_members world_size = 2 outputs = 0 {
^bb0(%a: tensor<?xf32>, %b: tensor<?xf32>, %s: tensor<2xi64>):
  %buf, %send, %recv = sparse.join_segments(%a) (%b, %b, %b) send(%s, %s) recv(%s, %s) : (tensor<?xf32>) (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>), tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<2xi64>, tensor<2xi64>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// Exchange buffers are flat.
// CHECK: sparse.join_segments: first member must be a 1-D exchange buffer, got tensor<?x4xf32>
func.func @join_flat(%a: tensor<?x4xf32>, %b: tensor<?xf32>, %s: tensor<2xi64>) {
  %buf, %send, %recv = sparse.join_segments(%a) (%b) send(%s, %s) recv(%s, %s) : (tensor<?x4xf32>) (tensor<?xf32>), tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<2xi64>, tensor<2xi64>
  func.return
}

// -----

// CHECK: sparse.join_segments: sizes 2 needs one count per rank (2), got tensor<3xi64>
sched.step @join_sizes world_size = 2 outputs = 0 {
^bb0(%a: tensor<?xf32>, %s: tensor<2xi64>, %t: tensor<3xi64>):
  %buf, %send, %recv = sparse.join_segments(%a) (%a) send(%s, %s) recv(%t, %s) : (tensor<?xf32>) (tensor<?xf32>), tensor<2xi64>, tensor<2xi64>, tensor<3xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<2xi64>, tensor<2xi64>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// CHECK: sparse.split_segments: second member has element type f64, the buffer f32
func.func @split_dtypes(%buf: tensor<?xf32>, %s: tensor<2xi64>) {
  %a, %b = sparse.split_segments %buf recv(%s, %s) : tensor<?xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<?xf64>
  func.return
}

// -----

// CHECK: sparse.split_segments: sizes 0 must be a 1-D integer tensor, got tensor<2xf32>
func.func @split_sizes(%buf: tensor<?xf32>, %s: tensor<2xi64>, %f: tensor<2xf32>) {
  %a, %b = sparse.split_segments %buf recv(%f, %s) : tensor<?xf32>, tensor<2xf32>, tensor<2xi64> -> tensor<?xf32>, tensor<?xf32>
  func.return
}
