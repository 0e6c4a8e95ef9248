// RUN: sparselift-opt %s | sparselift-opt | filecheck %s
// RUN: sparselift-opt %s --print-op-generic | sparselift-opt | filecheck %s

// An unweighted one-table collection: f32 table, sum pooling, table_wise placement.
// CHECK-LABEL: func.func @ebc_unweighted(%ids: tensor<?xi64>, %offs: tensor<?xi64>) -> tensor<?x16xf32> {
// CHECK-NEXT:    %p = sparse.embedding_bag_collection "emb_l" ids(%ids : tensor<?xi64>) offsets(%offs : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 1460, dim = 16, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x16xf32>
// CHECK-NEXT:    func.return %p : tensor<?x16xf32>
// CHECK-NEXT:  }
func.func @ebc_unweighted(%ids: tensor<?xi64>, %offs: tensor<?xi64>) -> tensor<?x16xf32> {
  %p = sparse.embedding_bag_collection "emb_l" ids(%ids : tensor<?xi64>) offsets(%offs : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 1460, dim = 16, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// Every table dtype (f32, f16, bf16), both poolings, every placement kind, weighted features.
// CHECK-LABEL: func.func @ebc_dtypes_placements(%i0: tensor<?xi64>, %i1: tensor<?xi32>, %i2: tensor<?xi64>, %o0: tensor<?xi64>, %o1: tensor<?xi32>, %o2: tensor<?xi64>, %w1: tensor<?xf16>, %w2: tensor<?xf32>) -> (tensor<?x16xf32>, tensor<?x8xf16>, tensor<4x4xbf16>) {
// CHECK-NEXT:    %p, %p_1, %p_2 = sparse.embedding_bag_collection "emb_mixed" ids(%i0, %i1, %i2 : tensor<?xi64>, tensor<?xi32>, tensor<?xi64>) offsets(%o0, %o1, %o2 : tensor<?xi64>, tensor<?xi32>, tensor<?xi64>) weights(%w1, %w2 : tensor<?xf16>, tensor<?xf32>) tables = [#sparse.table<"t0", rows = 100, dim = 16, f32, sum>, #sparse.table<"t1", rows = 60, dim = 8, f16, mean>, #sparse.table<"t2", rows = 7, dim = 4, bf16, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.5, weighted>, #sparse.feature<"f2" -> "t2", pooling_factor = 0.0, weighted>] placements = [#sparse.placement<"t0", table_wise, rank = 3>, #sparse.placement<"t1", row_wise, ranks = [2, 0, 1], row_bounds = [0, 20, 30, 60]>, #sparse.placement<"t2", data_parallel>] -> tensor<?x16xf32>, tensor<?x8xf16>, tensor<4x4xbf16>
// CHECK-NEXT:    func.return %p, %p_1, %p_2 : tensor<?x16xf32>, tensor<?x8xf16>, tensor<4x4xbf16>
// CHECK-NEXT:  }
func.func @ebc_dtypes_placements(%i0: tensor<?xi64>, %i1: tensor<?xi32>, %i2: tensor<?xi64>, %o0: tensor<?xi64>, %o1: tensor<?xi32>, %o2: tensor<?xi64>, %w1: tensor<?xf16>, %w2: tensor<?xf32>) -> (tensor<?x16xf32>, tensor<?x8xf16>, tensor<4x4xbf16>) {
  %p:3 = sparse.embedding_bag_collection "emb_mixed" ids(%i0, %i1, %i2 : tensor<?xi64>, tensor<?xi32>, tensor<?xi64>) offsets(%o0, %o1, %o2 : tensor<?xi64>, tensor<?xi32>, tensor<?xi64>) weights(%w1, %w2 : tensor<?xf16>, tensor<?xf32>) tables = [#sparse.table<"t0", rows = 100, dim = 16, f32, sum>, #sparse.table<"t1", rows = 60, dim = 8, f16, mean>, #sparse.table<"t2", rows = 7, dim = 4, bf16, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 2.5, weighted>, #sparse.feature<"f2" -> "t2", pooling_factor = 0.0, weighted>] placements = [#sparse.placement<"t0", table_wise, rank = 3>, #sparse.placement<"t1", row_wise, ranks = [2, 0, 1], row_bounds = [0, 20, 30, 60]>, #sparse.placement<"t2", data_parallel>] -> tensor<?x16xf32>, tensor<?x8xf16>, tensor<4x4xbf16>
  func.return %p#0, %p#1, %p#2 : tensor<?x16xf32>, tensor<?x8xf16>, tensor<4x4xbf16>
}

// A table's share of distinct ids in a batch (workload statistics): printed when under 1, so
// `distinct = 1.0` (nothing known of repeats: the upper bound) reads back as the plain table.
// CHECK-LABEL: func.func @table_distinct() attributes {seen = #sparse.table<"item", rows = 100, dim = 8, f32, none, distinct = 0.4>, none_known = #sparse.table<"item", rows = 100, dim = 8, f32, none>} {
func.func @table_distinct() attributes {seen = #sparse.table<"item", rows = 100, dim = 8, f32, none, distinct = 0.4>, none_known = #sparse.table<"item", rows = 100, dim = 8, f32, none, distinct = 1.0>} {
  func.return
}

// An unpooled table (nn.Embedding): one feature per id position, every bag at most one id.
// CHECK-LABEL: func.func @ebc_unpooled(%i0: tensor<?xi64>, %i1: tensor<?xi64>, %o0: tensor<?xi64>, %o1: tensor<?xi64>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
// CHECK-NEXT:    %p, %p_1 = sparse.embedding_bag_collection "item" ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"item", rows = 100, dim = 8, f32, none>] features = [#sparse.feature<"hist[0]" -> "item", pooling_factor = 1.0>, #sparse.feature<"hist[1]" -> "item", pooling_factor = 0.75>] placements = [#sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>] -> tensor<?x8xf32>, tensor<?x8xf32>
func.func @ebc_unpooled(%i0: tensor<?xi64>, %i1: tensor<?xi64>, %o0: tensor<?xi64>, %o1: tensor<?xi64>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %p:2 = sparse.embedding_bag_collection "item" ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"item", rows = 100, dim = 8, f32, none>] features = [#sparse.feature<"hist[0]" -> "item", pooling_factor = 1.0>, #sparse.feature<"hist[1]" -> "item", pooling_factor = 0.75>] placements = [#sparse.placement<"item", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>] -> tensor<?x8xf32>, tensor<?x8xf32>
  func.return %p#0, %p#1 : tensor<?x8xf32>, tensor<?x8xf32>
}

// Two features sharing one table, inside a step whose world covers every placed rank.
// CHECK-LABEL: sched.step @ebc_in_step world_size = 2 outputs = 2 {
// CHECK-NEXT:  ^bb0(%i0: tensor<?xi64>, %i1: tensor<?xi64>, %o0: tensor<?xi64>, %o1: tensor<?xi64>):
// CHECK-NEXT:    %p, %p_1 = sparse.embedding_bag_collection "emb_shared" ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, mean>] features = [#sparse.feature<"a" -> "t0", pooling_factor = 3.0>, #sparse.feature<"b" -> "t0", pooling_factor = 0.5>] placements = [#sparse.placement<"t0", row_wise, ranks = [1, 0], row_bounds = [0, 5, 10]>] -> tensor<?x4xf32>, tensor<?x4xf32>
// CHECK-NEXT:    sched.yield %p, %p_1 : tensor<?x4xf32>, tensor<?x4xf32>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%g0: tensor<?x4xf32>, %g1: tensor<?x4xf32>):
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  }
sched.step @ebc_in_step world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %i1: tensor<?xi64>, %o0: tensor<?xi64>, %o1: tensor<?xi64>):
  %p:2 = sparse.embedding_bag_collection "emb_shared" ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, mean>] features = [#sparse.feature<"a" -> "t0", pooling_factor = 3.0>, #sparse.feature<"b" -> "t0", pooling_factor = 0.5>] placements = [#sparse.placement<"t0", row_wise, ranks = [1, 0], row_bounds = [0, 5, 10]>] -> tensor<?x4xf32>, tensor<?x4xf32>
  sched.yield %p#0, %p#1 : tensor<?x4xf32>, tensor<?x4xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x4xf32>):
  sched.yield
}

// Routing without weights: no routed-weights result.
// CHECK-LABEL: func.func @route_unweighted(%i0: tensor<?xi64>, %o0: tensor<?xi64>) -> (tensor<?xi32>, tensor<?xi64>, tensor<4xi64>) {
// CHECK-NEXT:    %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 3>] world_size = 4 -> tensor<?xi32>, tensor<?xi64>, tensor<4xi64>
// CHECK-NEXT:    func.return %l, %ix, %sp : tensor<?xi32>, tensor<?xi64>, tensor<4xi64>
// CHECK-NEXT:  }
func.func @route_unweighted(%i0: tensor<?xi64>, %o0: tensor<?xi64>) -> (tensor<?xi32>, tensor<?xi64>, tensor<4xi64>) {
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 3>] world_size = 4 -> tensor<?xi32>, tensor<?xi64>, tensor<4xi64>
  func.return %l, %ix, %sp : tensor<?xi32>, tensor<?xi64>, tensor<4xi64>
}

// Routing with two weighted features: two weight operands, one routed-weights buffer.
// CHECK-LABEL: func.func @route_weighted(%i0: tensor<?xi64>, %i1: tensor<?xi32>, %i2: tensor<?xi64>, %o0: tensor<?xi64>, %o1: tensor<?xi64>, %o2: tensor<?xi64>, %w0: tensor<?xf32>, %w2: tensor<?xf32>) -> (tensor<?xi32>, tensor<?xi64>, tensor<?xi64>, tensor<?xf32>) {
// CHECK-NEXT:    %l, %ix, %sp, %rw = sparse.route ids(%i0, %i1, %i2 : tensor<?xi64>, tensor<?xi32>, tensor<?xi64>) offsets(%o0, %o1, %o2 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) weights(%w0, %w2 : tensor<?xf32>, tensor<?xf32>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>, #sparse.feature<"f1" -> "t1", pooling_factor = 4.0>, #sparse.feature<"f2" -> "t0", pooling_factor = 2.0, weighted>] placements = [#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>, #sparse.placement<"t1", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<?xi64>, tensor<?xf32>
// CHECK-NEXT:    func.return %l, %ix, %sp, %rw : tensor<?xi32>, tensor<?xi64>, tensor<?xi64>, tensor<?xf32>
// CHECK-NEXT:  }
func.func @route_weighted(%i0: tensor<?xi64>, %i1: tensor<?xi32>, %i2: tensor<?xi64>, %o0: tensor<?xi64>, %o1: tensor<?xi64>, %o2: tensor<?xi64>, %w0: tensor<?xf32>, %w2: tensor<?xf32>) -> (tensor<?xi32>, tensor<?xi64>, tensor<?xi64>, tensor<?xf32>) {
  %l, %ix, %sp, %rw = sparse.route ids(%i0, %i1, %i2 : tensor<?xi64>, tensor<?xi32>, tensor<?xi64>) offsets(%o0, %o1, %o2 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) weights(%w0, %w2 : tensor<?xf32>, tensor<?xf32>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>, #sparse.feature<"f1" -> "t1", pooling_factor = 4.0>, #sparse.feature<"f2" -> "t0", pooling_factor = 2.0, weighted>] placements = [#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 50, 100]>, #sparse.placement<"t1", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<?xi64>, tensor<?xf32>
  func.return %l, %ix, %sp, %rw : tensor<?xi32>, tensor<?xi64>, tensor<?xi64>, tensor<?xf32>
}

// A lookup without weights serving one slot.
// CHECK-LABEL: func.func @lookup(%l: tensor<?xi32>, %ix: tensor<?xi64>) -> tensor<?x16xf32> {
// CHECK-NEXT:    %p = sparse.lookup %l, %ix table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
// CHECK-NEXT:    func.return %p : tensor<?x16xf32>
// CHECK-NEXT:  }
func.func @lookup(%l: tensor<?xi32>, %ix: tensor<?xi64>) -> tensor<?x16xf32> {
  %p = sparse.lookup %l, %ix table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// A weighted lookup serving two slots of a row-wise f16 table: width = 2 x dim.
// CHECK-LABEL: func.func @lookup_weighted(%l: tensor<?xi64>, %ix: tensor<?xi32>, %w: tensor<?xf16>) -> tensor<?x16xf16> {
// CHECK-NEXT:    %p = sparse.lookup %l, %ix weights %w : tensor<?xf16> table = #sparse.table<"t1", rows = 64, dim = 8, f16, mean> placement = #sparse.placement<"t1", row_wise, ranks = [0, 1], row_bounds = [0, 32, 64]> slots = [2, 0] : tensor<?xi64>, tensor<?xi32> -> tensor<?x16xf16>
// CHECK-NEXT:    func.return %p : tensor<?x16xf16>
// CHECK-NEXT:  }
func.func @lookup_weighted(%l: tensor<?xi64>, %ix: tensor<?xi32>, %w: tensor<?xf16>) -> tensor<?x16xf16> {
  %p = sparse.lookup %l, %ix weights %w : tensor<?xf16> table = #sparse.table<"t1", rows = 64, dim = 8, f16, mean> placement = #sparse.placement<"t1", row_wise, ranks = [0, 1], row_bounds = [0, 32, 64]> slots = [2, 0] : tensor<?xi64>, tensor<?xi32> -> tensor<?x16xf16>
  func.return %p : tensor<?x16xf16>
}

// A lookup inside a step, on a data-parallel bf16 table with a dynamic width.
// CHECK-LABEL: sched.step @lookup_in_step world_size = 2 outputs = 1 {
// CHECK-NEXT:  ^bb0(%l: tensor<?xi32>, %ix: tensor<?xi64>):
// CHECK-NEXT:    %p = sparse.lookup %l, %ix table = #sparse.table<"t2", rows = 5, dim = 4, bf16, sum> placement = #sparse.placement<"t2", data_parallel> slots = [1] : tensor<?xi32>, tensor<?xi64> -> tensor<?x?xbf16>
// CHECK-NEXT:    sched.yield %p : tensor<?x?xbf16>
// CHECK-NEXT:  } backward {
// CHECK-NEXT:  ^bb0(%g: tensor<?x?xbf16>):
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  }
sched.step @lookup_in_step world_size = 2 outputs = 1 {
^bb0(%l: tensor<?xi32>, %ix: tensor<?xi64>):
  %p = sparse.lookup %l, %ix table = #sparse.table<"t2", rows = 5, dim = 4, bf16, sum> placement = #sparse.placement<"t2", data_parallel> slots = [1] : tensor<?xi32>, tensor<?xi64> -> tensor<?x?xbf16>
  sched.yield %p : tensor<?x?xbf16>
} backward {
^bb1(%g: tensor<?x?xbf16>):
  sched.yield
}

// Every optimizer kind, each in its hyperparameter group (group 0 is not printed).
// CHECK-LABEL: func.func @optimizer_kinds() attributes {a = #sparse.optimizer<adagrad>, b = #sparse.optimizer<adam, group = 1>, c = #sparse.optimizer<adamw, group = 2>, d = #sparse.optimizer<partial_rowwise_adam, group = 3>, e = #sparse.optimizer<rowwise_adagrad>, f = #sparse.optimizer<sgd>} {
func.func @optimizer_kinds() attributes {a = #sparse.optimizer<adagrad, group = 0>, b = #sparse.optimizer<adam, group = 1>, c = #sparse.optimizer<adamw, group = 2>, d = #sparse.optimizer<partial_rowwise_adam, group = 3>, e = #sparse.optimizer<rowwise_adagrad>, f = #sparse.optimizer<sgd>} {
  func.return
}

// The fused backward + SGD update, without weights.
// CHECK-LABEL: func.func @lookup_update_sgd(%l: tensor<?xi32>, %ix: tensor<?xi64>, %g: tensor<?x16xf32>) {
// CHECK-NEXT:    sparse.lookup_update %l, %ix grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 1> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @lookup_update_sgd(%l: tensor<?xi32>, %ix: tensor<?xi64>, %g: tensor<?x16xf32>) {
  sparse.lookup_update %l, %ix grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 1> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
  func.return
}

// The fused backward + row-wise Adagrad update, with weights, two slots, integer lr.
// CHECK-LABEL: func.func @lookup_update_adagrad(%l: tensor<?xi32>, %ix: tensor<?xi32>, %w: tensor<?xf32>, %g: tensor<?x32xf32>) {
// CHECK-NEXT:    sparse.lookup_update %l, %ix weights %w : tensor<?xf32> grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, mean> placement = #sparse.placement<"t0", row_wise, ranks = [1, 0], row_bounds = [0, 10, 100]> slots = [0, 1] optimizer = #sparse.optimizer<rowwise_adagrad> : tensor<?xi32>, tensor<?xi32>, tensor<?x32xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @lookup_update_adagrad(%l: tensor<?xi32>, %ix: tensor<?xi32>, %w: tensor<?xf32>, %g: tensor<?x32xf32>) {
  sparse.lookup_update %l, %ix weights %w : tensor<?xf32> grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, mean> placement = #sparse.placement<"t0", row_wise, ranks = [1, 0], row_bounds = [0, 10, 100]> slots = [0, 1] optimizer = #sparse.optimizer<rowwise_adagrad> : tensor<?xi32>, tensor<?xi32>, tensor<?x32xf32>
  func.return
}

// The dense gradient of a replicated table (with and without weights) and its optimizer update.
// CHECK-LABEL: func.func @lookup_grad_dense_update(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xf16>, %g: tensor<?x8xf16>, %g2: tensor<?x16xf16>) {
// CHECK-NEXT:    %tg = sparse.lookup_grad %l, %i grad %g table = #sparse.table<"t1", rows = 7, dim = 8, f16, sum> placement = #sparse.placement<"t1", data_parallel> slots = [1] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf16> -> tensor<7x8xf16>
// CHECK-NEXT:    %tw = sparse.lookup_grad %l, %i weights %w : tensor<?xf16> grad %g2 table = #sparse.table<"t1", rows = 7, dim = 8, f16, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0, 2] : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf16> -> tensor<7x8xf16>
// CHECK-NEXT:    sparse.lookup_update grad %tg table = #sparse.table<"t1", rows = 7, dim = 8, f16, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<7x8xf16>
// CHECK-NEXT:    sparse.lookup_update grad %tw table = #sparse.table<"t1", rows = 7, dim = 8, f16, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0] optimizer = #sparse.optimizer<rowwise_adagrad> : tensor<7x8xf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @lookup_grad_dense_update(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xf16>, %g: tensor<?x8xf16>, %g2: tensor<?x16xf16>) {
  %tg = sparse.lookup_grad %l, %i grad %g table = #sparse.table<"t1", rows = 7, dim = 8, f16, sum> placement = #sparse.placement<"t1", data_parallel> slots = [1] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf16> -> tensor<7x8xf16>
  %tw = sparse.lookup_grad %l, %i weights %w : tensor<?xf16> grad %g2 table = #sparse.table<"t1", rows = 7, dim = 8, f16, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0, 2] : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf16> -> tensor<7x8xf16>
  sparse.lookup_update grad %tg table = #sparse.table<"t1", rows = 7, dim = 8, f16, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<7x8xf16>
  sparse.lookup_update grad %tw table = #sparse.table<"t1", rows = 7, dim = 8, f16, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0] optimizer = #sparse.optimizer<rowwise_adagrad> : tensor<7x8xf16>
  func.return
}

// Two segments, a 2-D member, a 1-D static member, a jagged member, and a member absent
// (size 0) from segment 1; an i32 member widened into the i64 buffer.
// CHECK-LABEL: func.func @pack_unpack_layout(%a: tensor<?x4xi64>, %b: tensor<?xi32>, %c: tensor<?xi64>) -> (tensor<?x4xi64>, tensor<?xi32>, tensor<?xi64>) {
// CHECK-NEXT:    %buf = sparse.pack %a, %b, %c layout = #sparse.layout<{{\[\[}}0 : 4, 4 : 1, ? : ?], [0 : 0, 0 : 2, ? : ?]]> : tensor<?x4xi64>, tensor<?xi32>, tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:    %u, %u_1, %u_2 = sparse.unpack %buf layout = #sparse.layout<{{\[\[}}0 : 4, 4 : 1, ? : ?], [0 : 0, 0 : 2, ? : ?]]> : tensor<?xi64> -> tensor<?x4xi64>, tensor<?xi32>, tensor<?xi64>
// CHECK-NEXT:    func.return %u, %u_1, %u_2 : tensor<?x4xi64>, tensor<?xi32>, tensor<?xi64>
// CHECK-NEXT:  }
func.func @pack_unpack_layout(%a: tensor<?x4xi64>, %b: tensor<?xi32>, %c: tensor<?xi64>) -> (tensor<?x4xi64>, tensor<?xi32>, tensor<?xi64>) {
  %buf = sparse.pack %a, %b, %c layout = #sparse.layout<[[0 : 4, 4 : 1, ? : ?], [0 : 0, 0 : 2, ? : ?]]> : tensor<?x4xi64>, tensor<?xi32>, tensor<?xi64> -> tensor<?xi64>
  %u:3 = sparse.unpack %buf layout = #sparse.layout<[[0 : 4, 4 : 1, ? : ?], [0 : 0, 0 : 2, ? : ?]]> : tensor<?xi64> -> tensor<?x4xi64>, tensor<?xi32>, tensor<?xi64>
  func.return %u#0, %u#1, %u#2 : tensor<?x4xi64>, tensor<?xi32>, tensor<?xi64>
}

// pack/unpack pinned to a rank (`on_rank`), with three segments of pooled embeddings.
// CHECK-LABEL: func.func @pack_unpack_on_rank(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
// CHECK-NEXT:    %buf = sparse.pack %x, %y layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 8], [8 : 16, 0 : 8], [0 : 16, 16 : 0]]> on_rank 2 : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
// CHECK-NEXT:    %u, %u_1 = sparse.unpack %buf layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 8], [8 : 16, 0 : 8], [0 : 16, 16 : 0]]> on_rank 2 : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:    func.return %u, %u_1 : tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:  }
func.func @pack_unpack_on_rank(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %buf = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8], [8 : 16, 0 : 8], [0 : 16, 16 : 0]]> on_rank 2 : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  %u:2 = sparse.unpack %buf layout = #sparse.layout<[[0 : 16, 16 : 8], [8 : 16, 0 : 8], [0 : 16, 16 : 0]]> on_rank 2 : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  func.return %u#0, %u#1 : tensor<?x16xf32>, tensor<?x8xf32>
}

// unpack may slice the buffer differently from its pack (pack per table, unpack per feature),
// reading the same segments with the same widths.
// CHECK-LABEL: func.func @pack_unpack_regroup(%x: tensor<?x32xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
// CHECK-NEXT:    %buf = sparse.pack %x layout = #sparse.layout<{{\[\[}}0 : 32], [0 : 0]]> : tensor<?x32xf32> -> tensor<?xf32>
// CHECK-NEXT:    %u, %u_1 = sparse.unpack %buf layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 16], [0 : 0, 0 : 0]]> : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x16xf32>
// CHECK-NEXT:    func.return %u, %u_1 : tensor<?x16xf32>, tensor<?x16xf32>
// CHECK-NEXT:  }
func.func @pack_unpack_regroup(%x: tensor<?x32xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  %buf = sparse.pack %x layout = #sparse.layout<[[0 : 32], [0 : 0]]> : tensor<?x32xf32> -> tensor<?xf32>
  %u:2 = sparse.unpack %buf layout = #sparse.layout<[[0 : 16, 16 : 16], [0 : 0, 0 : 0]]> : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x16xf32>
  func.return %u#0, %u#1 : tensor<?x16xf32>, tensor<?x16xf32>
}

// A layout without members: the empty buffer of a rank that serves no table.
// CHECK-LABEL: func.func @pack_unpack_empty() -> tensor<?xi64> {
// CHECK-NEXT:    %buf = sparse.pack layout = #sparse.layout<{{\[\[}}], []]> : -> tensor<?xi64>
// CHECK-NEXT:    sparse.unpack %buf layout = #sparse.layout<{{\[\[}}], []]> : tensor<?xi64> ->
// CHECK-NEXT:    func.return %buf : tensor<?xi64>
// CHECK-NEXT:  }
func.func @pack_unpack_empty() -> tensor<?xi64> {
  %buf = sparse.pack layout = #sparse.layout<[[], []]> : -> tensor<?xi64>
  sparse.unpack %buf layout = #sparse.layout<[[], []]> : tensor<?xi64> ->
  func.return %buf : tensor<?xi64>
}

// A single-member, single-segment layout (the shape that canonicalize folds).
// CHECK-LABEL: func.func @pack_single(%x: tensor<?xf32>) -> tensor<?xf32> {
// CHECK-NEXT:    %buf = sparse.pack %x layout = #sparse.layout<{{\[\[}}? : ?]]> : tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:    func.return %buf : tensor<?xf32>
// CHECK-NEXT:  }
func.func @pack_single(%x: tensor<?xf32>) -> tensor<?xf32> {
  %buf = sparse.pack %x layout = #sparse.layout<[[? : ?]]> : tensor<?xf32> -> tensor<?xf32>
  func.return %buf : tensor<?xf32>
}

// Permute pooled outputs back into model feature order.
// CHECK-LABEL: func.func @permute(%a: tensor<?x16xf32>, %b: tensor<?x8xf32>, %c: tensor<?x4xf16>) -> (tensor<?x4xf16>, tensor<?x16xf32>, tensor<?x8xf32>) {
// CHECK-NEXT:    %r, %r_1, %r_2 = sparse.permute %a, %b, %c order = [2, 0, 1] : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x4xf16> -> tensor<?x4xf16>, tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:    func.return %r, %r_1, %r_2 : tensor<?x4xf16>, tensor<?x16xf32>, tensor<?x8xf32>
// CHECK-NEXT:  }
func.func @permute(%a: tensor<?x16xf32>, %b: tensor<?x8xf32>, %c: tensor<?x4xf16>) -> (tensor<?x4xf16>, tensor<?x16xf32>, tensor<?x8xf32>) {
  %r:3 = sparse.permute %a, %b, %c order = [2, 0, 1] : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x4xf16> -> tensor<?x4xf16>, tensor<?x16xf32>, tensor<?x8xf32>
  func.return %r#0, %r#1, %r#2 : tensor<?x4xf16>, tensor<?x16xf32>, tensor<?x8xf32>
}

// One jagged buffer per destination: lengths, ids and bit-cast weights (two ranks serving 1 and 3
// features); the unpack may drop the weights when nobody reads them.
// CHECK-LABEL: func.func @pack_ids(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xf32>) -> (tensor<?xi32>, tensor<?xi64>, tensor<?xf32>, tensor<?xi64>) {
// CHECK-NEXT:    %b, %s = sparse.pack_ids %l, %i weights %w : tensor<?xf32> features = [1, 3] : tensor<?xi32>, tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
// CHECK-NEXT:    %l2, %i2, %w2 = sparse.unpack_ids %b, %s features = [1, 3] : tensor<?xi64>, tensor<2xi64> -> tensor<?xi32>, tensor<?xi64>, tensor<?xf32>
// CHECK-NEXT:    %l3, %i3 = sparse.unpack_ids %b, %s features = [1, 3] : tensor<?xi64>, tensor<2xi64> -> tensor<?xi32>, tensor<?xi64>
// CHECK-NEXT:    func.return %l2, %i2, %w2, %i3 : tensor<?xi32>, tensor<?xi64>, tensor<?xf32>, tensor<?xi64>
// CHECK-NEXT:  }
func.func @pack_ids(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xf32>) -> (tensor<?xi32>, tensor<?xi64>, tensor<?xf32>, tensor<?xi64>) {
  %b, %s = sparse.pack_ids %l, %i weights %w : tensor<?xf32> features = [1, 3] : tensor<?xi32>, tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %l2, %i2, %w2 = sparse.unpack_ids %b, %s features = [1, 3] : tensor<?xi64>, tensor<2xi64> -> tensor<?xi32>, tensor<?xi64>, tensor<?xf32>
  %l3, %i3 = sparse.unpack_ids %b, %s features = [1, 3] : tensor<?xi64>, tensor<2xi64> -> tensor<?xi32>, tensor<?xi64>
  func.return %l2, %i2, %w2, %i3 : tensor<?xi32>, tensor<?xi64>, tensor<?xf32>, tensor<?xi64>
}

// A fused lookup of two tables reading weighted ids: one pooled value per table (t1 serves two
// features side by side).
// CHECK-LABEL: func.func @fused_lookup(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xf32>) -> (tensor<?x4xf32>, tensor<?x16xf32>) {
// CHECK-NEXT:    %p, %q = sparse.fused_lookup %l, %i weights %w : tensor<?xf32> tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 20, dim = 8, f32, mean>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>] slots = [array<i64: 0>, array<i64: 1, 2>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>, tensor<?x16xf32>
// CHECK-NEXT:    func.return %p, %q : tensor<?x4xf32>, tensor<?x16xf32>
// CHECK-NEXT:  }
func.func @fused_lookup(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xf32>) -> (tensor<?x4xf32>, tensor<?x16xf32>) {
  %p, %q = sparse.fused_lookup %l, %i weights %w : tensor<?xf32> tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 20, dim = 8, f32, mean>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>] slots = [array<i64: 0>, array<i64: 1, 2>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>, tensor<?x16xf32>
  func.return %p, %q : tensor<?x4xf32>, tensor<?x16xf32>
}

// A fused update: one pooled gradient per table, the optimizer fused in.
// CHECK-LABEL: func.func @fused_lookup_update(%l: tensor<?xi32>, %i: tensor<?xi32>, %g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>) {
// CHECK-NEXT:    sparse.fused_lookup_update %l, %i grads(%g0, %g1 : tensor<?x4xf32>, tensor<?x8xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 20, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 5, 10]>, #sparse.placement<"t1", row_wise, ranks = [0, 1], row_bounds = [0, 10, 20]>] slots = [array<i64: 0>, array<i64: 1>] optimizer = #sparse.optimizer<rowwise_adagrad> : tensor<?xi32>, tensor<?xi32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @fused_lookup_update(%l: tensor<?xi32>, %i: tensor<?xi32>, %g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>) {
  sparse.fused_lookup_update %l, %i grads(%g0, %g1 : tensor<?x4xf32>, tensor<?x8xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 20, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 5, 10]>, #sparse.placement<"t1", row_wise, ranks = [0, 1], row_bounds = [0, 10, 20]>] slots = [array<i64: 0>, array<i64: 1>] optimizer = #sparse.optimizer<rowwise_adagrad> : tensor<?xi32>, tensor<?xi32>
  func.return
}

// The replicated tables' whole-table gradients in one call, one [rows, dim] per table.
// CHECK-LABEL: func.func @fused_lookup_grad(%l: tensor<?xi32>, %i: tensor<?xi64>, %g0: tensor<?x8xf32>, %g1: tensor<?x4xf32>) -> (tensor<10x8xf32>, tensor<6x4xf32>) {
// CHECK-NEXT:    %t0, %t1 = sparse.fused_lookup_grad %l, %i grads(%g0, %g1 : tensor<?x8xf32>, tensor<?x4xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 8, f32, sum>, #sparse.table<"t1", rows = 6, dim = 4, f32, sum>] placements = [#sparse.placement<"t0", data_parallel>, #sparse.placement<"t1", data_parallel>] slots = [array<i64: 0>, array<i64: 1>] : tensor<?xi32>, tensor<?xi64> -> tensor<10x8xf32>, tensor<6x4xf32>
// CHECK-NEXT:    func.return %t0, %t1 : tensor<10x8xf32>, tensor<6x4xf32>
// CHECK-NEXT:  }
func.func @fused_lookup_grad(%l: tensor<?xi32>, %i: tensor<?xi64>, %g0: tensor<?x8xf32>, %g1: tensor<?x4xf32>) -> (tensor<10x8xf32>, tensor<6x4xf32>) {
  %t0, %t1 = sparse.fused_lookup_grad %l, %i grads(%g0, %g1 : tensor<?x8xf32>, tensor<?x4xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 8, f32, sum>, #sparse.table<"t1", rows = 6, dim = 4, f32, sum>] placements = [#sparse.placement<"t0", data_parallel>, #sparse.placement<"t1", data_parallel>] slots = [array<i64: 0>, array<i64: 1>] : tensor<?xi32>, tensor<?xi64> -> tensor<10x8xf32>, tensor<6x4xf32>
  func.return %t0, %t1 : tensor<10x8xf32>, tensor<6x4xf32>
}

// The per-slot form: table t0's two slots give their gradients one by one ([bags, dim] each),
// then t1's one slot.
// CHECK-LABEL: func.func @fused_lookup_grad_per_slot(%l: tensor<?xi32>, %i: tensor<?xi64>, %a: tensor<?x4xf32>, %b: tensor<?x4xf32>, %g1: tensor<?x8xf32>) -> (tensor<10x4xf32>, tensor<6x8xf32>) {
// CHECK-NEXT:    %t0, %t1 = sparse.fused_lookup_grad %l, %i grads(%a, %b, %g1 : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x8xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, none>, #sparse.table<"t1", rows = 6, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", data_parallel>, #sparse.placement<"t1", data_parallel>] slots = [array<i64: 0, 1>, array<i64: 2>] : tensor<?xi32>, tensor<?xi64> -> tensor<10x4xf32>, tensor<6x8xf32>
// CHECK-NEXT:    func.return %t0, %t1 : tensor<10x4xf32>, tensor<6x8xf32>
// CHECK-NEXT:  }
func.func @fused_lookup_grad_per_slot(%l: tensor<?xi32>, %i: tensor<?xi64>, %a: tensor<?x4xf32>, %b: tensor<?x4xf32>, %g1: tensor<?x8xf32>) -> (tensor<10x4xf32>, tensor<6x8xf32>) {
  %t0, %t1 = sparse.fused_lookup_grad %l, %i grads(%a, %b, %g1 : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x8xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, none>, #sparse.table<"t1", rows = 6, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", data_parallel>, #sparse.placement<"t1", data_parallel>] slots = [array<i64: 0, 1>, array<i64: 2>] : tensor<?xi32>, tensor<?xi64> -> tensor<10x4xf32>, tensor<6x8xf32>
  func.return %t0, %t1 : tensor<10x4xf32>, tensor<6x8xf32>
}

// A fused lookup in a routed step (rank 1 serves f0 then f1): its tables, placements and slots
// are the route's.
// CHECK-LABEL: sched.step @fused_lookup_routed world_size = 2 outputs = 2 {
// CHECK:         %p0, %p1 = sparse.fused_lookup %rl, %ri tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] slots = [array<i64: 0>, array<i64: 1>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>, tensor<?x8xf32>
sched.step @fused_lookup_routed world_size = 2 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p0, %p1 = sparse.fused_lookup %rl, %ri tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f32, sum>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] slots = [array<i64: 0>, array<i64: 1>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>, tensor<?x8xf32>
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x8xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}
