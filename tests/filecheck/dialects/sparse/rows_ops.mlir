// RUN: sparselift-opt %s --split-input-file | sparselift-opt --split-input-file | filecheck %s
// RUN: sparselift-opt %s --split-input-file --print-op-generic | sparselift-opt --split-input-file | filecheck %s

// The jagged rows path of one unpooled, table-wise table (`item` on rank 0, two id positions)
// on 2 ranks: the owner gathers the received ids' rows, the exchange is sized by the route's
// split sizes, the samples' side expands them (zeros for empty bags); backward compacts the
// gradients, sends them back and updates per id.
// CHECK-LABEL: sched.step @rows world_size = 2 outputs = 2 {
// CHECK:         %rows, %sizes = sparse.gather_rows %rl, %ri table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:    %back = sparse.row_splits %sp dim = 4 {group = "g"} : tensor<2xi64> -> tensor<2xi64>
// CHECK-NEXT:    %got, %got_sizes = coll.all_to_all %rows on #coll.group<[0, 1]> role #coll.role<output_rows> send_splits(%sizes : tensor<2xi64>) recv_splits(%back : tensor<2xi64>) {group = "g"} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:    %h0, %h1 = sparse.expand_rows %got, %l layout = #sparse.layout<{{\[\[}}0 : 4, 4 : 4], [0 : 0, 0 : 0]]> dim = 4 {group = "g"} : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>, tensor<?x4xf32>
// CHECK:       } backward {
// CHECK:         %c = sparse.compact_rows %sl, %g0, %g1 layout = #sparse.layout<{{\[\[}}0 : 4, 4 : 4], [0 : 0, 0 : 0]]> dim = 4 {group = "g"} : tensor<?xi32>, tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?xf32>
// CHECK-NEXT:    %gr, %gs = coll.all_to_all %c on #coll.group<[0, 1]> role #coll.role<grad_rows> send_splits(%sb : tensor<2xi64>) recv_splits(%ss : tensor<2xi64>) {group = "g"} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:    sparse.rows_update %si grad %gr table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] optimizer = #sparse.optimizer<rowwise_adagrad> {group = "g"} : tensor<?xi64>, tensor<?xf32>
sched.step @rows world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"h[0]" -> "item", pooling_factor = 1.0>, #sparse.feature<"h[1]" -> "item", pooling_factor = 0.5>] placements = [#sparse.placement<"item", table_wise, rank = 0>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[2, 0], [2, 0]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %rows, %sizes = sparse.gather_rows %rl, %ri table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
  %back = sparse.row_splits %sp dim = 4 {group = "g"} : tensor<2xi64> -> tensor<2xi64>
  %got, %got_sizes = coll.all_to_all %rows on #coll.group<[0, 1]> role #coll.role<output_rows> send_splits(%sizes : tensor<2xi64>) recv_splits(%back : tensor<2xi64>) {group = "g"} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
  %h0, %h1 = sparse.expand_rows %got, %l layout = #sparse.layout<[[0 : 4, 4 : 4], [0 : 0, 0 : 0]]> dim = 4 {group = "g"} : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>, tensor<?x4xf32>
  sched.yield %h0, %h1, %ri, %l, %sizes, %back : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?xi64>, tensor<?xi32>, tensor<2xi64>, tensor<2xi64>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x4xf32>, %si: tensor<?xi64>, %sl: tensor<?xi32>, %ss: tensor<2xi64>, %sb: tensor<2xi64>):
  %c = sparse.compact_rows %sl, %g0, %g1 layout = #sparse.layout<[[0 : 4, 4 : 4], [0 : 0, 0 : 0]]> dim = 4 {group = "g"} : tensor<?xi32>, tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?xf32>
  %gr, %gs = coll.all_to_all %c on #coll.group<[0, 1]> role #coll.role<grad_rows> send_splits(%sb : tensor<2xi64>) recv_splits(%ss : tensor<2xi64>) {group = "g"} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
  sparse.rows_update %si grad %gr table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1] optimizer = #sparse.optimizer<rowwise_adagrad> {group = "g"} : tensor<?xi64>, tensor<?xf32>
  sched.yield
}

// -----

// A row-wise table (`item` in row ranges on ranks 0 and 1): each id went to the rank whose range
// holds it, so every rank gathers, and every segment of the layout holds every member (a bag's
// row is in the segment of its id's owner).
// CHECK-LABEL: func.func @row_wise
// CHECK:         %rows, %sizes = sparse.gather_rows %rl, %ri table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 5, 10]> slots = [0, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:    %h0, %h1 = sparse.expand_rows %got, %l layout = #sparse.layout<{{\[\[}}0 : 4, 4 : 4], [0 : 4, 4 : 4]]> dim = 4 : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>, tensor<?x4xf32>
// CHECK-NEXT:    %c = sparse.compact_rows %l, %h0, %h1 layout = #sparse.layout<{{\[\[}}0 : 4, 4 : 4], [0 : 4, 4 : 4]]> dim = 4 : tensor<?xi32>, tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?xf32>
// CHECK-NEXT:    sparse.rows_update %ri grad %c table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 5, 10]> slots = [0, 1] optimizer = #sparse.optimizer<sgd> : tensor<?xi64>, tensor<?xf32>
func.func @row_wise(%rl: tensor<?xi32>, %ri: tensor<?xi64>, %l: tensor<?xi32>, %got: tensor<?xf32>) {
  %rows, %sizes = sparse.gather_rows %rl, %ri table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 5, 10]> slots = [0, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
  %h0, %h1 = sparse.expand_rows %got, %l layout = #sparse.layout<[[0 : 4, 4 : 4], [0 : 4, 4 : 4]]> dim = 4 : tensor<?xf32>, tensor<?xi32> -> tensor<?x4xf32>, tensor<?x4xf32>
  %c = sparse.compact_rows %l, %h0, %h1 layout = #sparse.layout<[[0 : 4, 4 : 4], [0 : 4, 4 : 4]]> dim = 4 : tensor<?xi32>, tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?xf32>
  sparse.rows_update %ri grad %c table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 5, 10]> slots = [0, 1] optimizer = #sparse.optimizer<sgd> : tensor<?xi64>, tensor<?xf32>
  func.return
}

// -----

// dedup-ids' ops: each destination's distinct ids, the rows spread back to one per routed id,
// the gradients summed into one per distinct id.
// CHECK-LABEL: sched.step @distinct world_size = 2 outputs = 1 {
// CHECK:         %u, %n, %inv = sparse.unique_ids %ix, %sp {group = "g"} : tensor<?xi64>, tensor<2xi64> -> tensor<?xi64>, tensor<2xi64>, tensor<?xi64>
// CHECK-NEXT:    %all = sparse.take_rows %rows, %inv dim = 4 {group = "g"} : tensor<?xf32>, tensor<?xi64> -> tensor<?xf32>
// CHECK:         %sum = sparse.sum_rows %c, %si, %sn dim = 4 {group = "g"} : tensor<?xf32>, tensor<?xi64>, tensor<2xi64> -> tensor<?xf32>
sched.step @distinct world_size = 2 outputs = 1 {
^bb0(%ix: tensor<?xi64>, %sp: tensor<2xi64>, %rows: tensor<?xf32>):
  %u, %n, %inv = sparse.unique_ids %ix, %sp {group = "g"} : tensor<?xi64>, tensor<2xi64> -> tensor<?xi64>, tensor<2xi64>, tensor<?xi64>
  %all = sparse.take_rows %rows, %inv dim = 4 {group = "g"} : tensor<?xf32>, tensor<?xi64> -> tensor<?xf32>
  sched.yield %all, %inv, %n : tensor<?xf32>, tensor<?xi64>, tensor<2xi64>
} backward {
^bb1(%c: tensor<?xf32>, %si: tensor<?xi64>, %sn: tensor<2xi64>):
  %sum = sparse.sum_rows %c, %si, %sn dim = 4 {group = "g"} : tensor<?xf32>, tensor<?xi64>, tensor<2xi64> -> tensor<?xf32>
  sched.yield
}
