// RUN: sparselift-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// Static splits form a square matrix.
// CHECK: all-to-all splits must be a square matrix (one row and column per rank)
func.func @splits_not_square(%x: tensor<?xi32>) -> tensor<?xi32> {
  %y = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1]]> : tensor<?xi32> -> tensor<?xi32>
  func.return %y : tensor<?xi32>
}

// -----

// Static splits form a square matrix (2 rows of 3).
// CHECK: all-to-all splits must be a square matrix (one row and column per rank)
func.func @splits_not_square_rect() attributes {s = #coll.splits<[[1, 1, 1], [1, 1, 1]]>} {
  func.return
}

// -----

// A role list is not empty.
// CHECK: identifier expected for the collective role
func.func @role_empty() attributes {r = #coll.role<>} {
  func.return
}

// -----

// A handle carries at least one type.
// CHECK: type expected
func.func @handle_empty(%h: !coll.handle<>) {
  func.return
}
