// RUN: sparselift-opt %s --split-input-file --verify-diagnostics | filecheck %s

//===----------------------------------------------------------------------===//
// #sparse.table
//===----------------------------------------------------------------------===//

// A table needs a name.
// CHECK: table name must not be empty
func.func @table_empty_name(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?x16xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// -----

// A table needs at least one row.
// CHECK: table 't0' must have at least one row, got 0
func.func @table_no_rows() attributes {t = #sparse.table<"t0", rows = 0, dim = 16, f32, sum>} {
  func.return
}

// -----

// A table's distinct share is a share of its ids: in (0, 1].
// CHECK: table 'item': distinct is a share of its ids, in (0, 1], got 0
func.func @table_distinct_zero() attributes {t = #sparse.table<"item", rows = 100, dim = 8, f32, none, distinct = 0.0>} {
  func.return
}

// -----

// CHECK: table 'item': distinct is a share of its ids, in (0, 1], got 1.5
func.func @table_distinct_over_one() attributes {t = #sparse.table<"item", rows = 100, dim = 8, f32, none, distinct = 1.5>} {
  func.return
}

// -----

// A table needs a positive embedding dim.
// CHECK: table 't0' must have a positive dim, got -4
func.func @table_negative_dim() attributes {t = #sparse.table<"t0", rows = 10, dim = -4, f32, sum>} {
  func.return
}

// -----

// Embeddings are floats.
// CHECK: table 't0' must have a float dtype, got i32
func.func @table_int_dtype() attributes {t = #sparse.table<"t0", rows = 10, dim = 4, i32, sum>} {
  func.return
}

// -----

// Only sum and mean pooling exist.
// CHECK: table 't0' has pooling 'max'; supported: sum, mean, none
func.func @table_bad_pooling() attributes {t = #sparse.table<"t0", rows = 10, dim = 4, f32, max>} {
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// #sparse.feature
//===----------------------------------------------------------------------===//

// The mean bag size cannot be negative.
// CHECK: feature 'f0' has a negative pooling_factor
func.func @feature_negative_pooling_factor() attributes {f = #sparse.feature<"f0" -> "t0", pooling_factor = -1.5>} {
  func.return
}

// -----

// The mean bag size must be finite (1.0e999 overflows to inf).
// CHECK: pooling_factor of feature 'f0' must be finite, got inf
func.func @feature_infinite_pooling_factor() attributes {f = #sparse.feature<"f0" -> "t0", pooling_factor = 1.0e999>} {
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// #sparse.placement
//===----------------------------------------------------------------------===//

// Unknown placement kind.
// CHECK: placement of table 't0': unknown kind 'column_wise'; expected one of table_wise, row_wise, data_parallel
func.func @placement_unknown_kind() attributes {p = #sparse.placement<"t0", column_wise>} {
  func.return
}

// -----

// Ranks are non-negative.
// CHECK: placement of table 't0': ranks must be non-negative, got [-1]
func.func @placement_negative_rank() attributes {p = #sparse.placement<"t0", table_wise, rank = -1>} {
  func.return
}

// -----

// A row-wise table cannot give two shards to one rank.
// CHECK: placement of table 't0': a rank appears twice in [1, 1]
func.func @placement_rank_twice() attributes {p = #sparse.placement<"t0", row_wise, ranks = [1, 1], row_bounds = [0, 5, 10]>} {
  func.return
}

// -----

// Row-wise: one more bound than ranks.
// CHECK: placement of table 't0': row_wise needs one more row bound than ranks, got 2 ranks and 2 bounds
func.func @placement_row_wise_bound_count() attributes {p = #sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 10]>} {
  func.return
}

// -----

// Row-wise: at least one rank.
// CHECK: placement of table 't0': row_wise needs one more row bound than ranks, got 0 ranks and 1 bounds
func.func @placement_row_wise_no_rank() attributes {p = #sparse.placement<"t0", row_wise, ranks = [], row_bounds = [0]>} {
  func.return
}

// -----

// Row ranges start at 0.
// CHECK: placement of table 't0': row ranges must start at 0 and be non-empty and increasing, got [1, 5, 10]
func.func @placement_rows_not_from_zero() attributes {p = #sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [1, 5, 10]>} {
  func.return
}

// -----

// Row ranges are non-empty.
// CHECK: placement of table 't0': row ranges must start at 0 and be non-empty and increasing, got [0, 5, 5]
func.func @placement_empty_row_range() attributes {p = #sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 5, 5]>} {
  func.return
}

// -----

// Row-wise ranges must cover exactly the table's rows (EBC).
// CHECK: placement of table 't0': row ranges cover rows [0, 90) but the table has 100 rows
func.func @ebc_row_ranges_short(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x16xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 100, dim = 16, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 50, 90]>] -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// -----

// Row-wise ranges must cover exactly the table's rows (lookup_update): too many rows.
// CHECK: placement of table 't0': row ranges cover rows [0, 120) but the table has 100 rows
func.func @lookup_update_row_ranges_long(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16xf32>) {
  sparse.lookup_update %l, %i grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 50, 120]> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
  func.return
}

// -----

// A placement rank must exist in the enclosing step's world (EBC).
// CHECK: placement of table 't1': rank 2 is out of range for world size 2
sched.step @ebc_rank_out_of_world world_size = 2 outputs = 1 {
^bb0(%i: tensor<?xi64>, %o: tensor<?xi64>):
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", row_wise, ranks = [0, 2], row_bounds = [0, 5, 10]>] -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// A lookup's placement rank must exist in the enclosing step's world.
// CHECK: placement of table 't0': rank 4 is out of range for world size 4
sched.step @lookup_rank_out_of_world world_size = 4 outputs = 1 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 4> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  sched.yield %p : tensor<?x16xf32>
} backward {
^bb1(%g: tensor<?x16xf32>):
  sched.yield
}

// -----

// A route's placement ranks must exist in its own world_size.
// CHECK: placement of table 't0': rank 3 is out of range for world size 2
func.func @route_rank_out_of_world(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 3>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// #sparse.optimizer
//===----------------------------------------------------------------------===//

// Unknown optimizer.
// CHECK: unknown optimizer 'rmsprop'; expected one of sgd, adagrad, rowwise_adagrad, adam, adamw, partial_rowwise_adam
func.func @optimizer_unknown() attributes {o = #sparse.optimizer<rmsprop>} {
  func.return
}

// -----

// A group is a non-negative index into the sparse optimizer's param_groups.
// CHECK: optimizer group must be non-negative, got -1
func.func @optimizer_negative_group(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16xf32>) {
  sparse.lookup_update %l, %i grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<adam, group = -1> : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// #sparse.layout
//===----------------------------------------------------------------------===//

// A layout has at least one segment.
// CHECK: a layout needs at least one segment
func.func @layout_no_segment() -> tensor<?xf32> {
  %b = sparse.pack layout = #sparse.layout<[]> : -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// A layout without members still describes every member of the op (here: none).
// CHECK: sparse.pack: layout describes 0 members but the op has 1
func.func @layout_no_member(%x: tensor<?xf32>) -> tensor<?xf32> {
  %b = sparse.pack %x layout = #sparse.layout<[[]]> : tensor<?xf32> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// Offset and size are both static or both `?`.
// CHECK: layout member 1 in segment 0: offset and size must both be static or both '?'
func.func @layout_half_dynamic(%x: tensor<?x4xf32>, %y: tensor<?xf32>) -> tensor<?xf32> {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 4, ? : 4]]> : tensor<?x4xf32>, tensor<?xf32> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// Offsets and sizes are non-negative.
// CHECK: layout member 0 in segment 1 has a negative offset or size
func.func @layout_negative(%x: tensor<?x4xf32>) -> tensor<?xf32> {
  %b = sparse.pack %x layout = #sparse.layout<[[0 : 4], [0 : -4]]> : tensor<?x4xf32> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// Members of a pack layout may not overlap.
// CHECK: layout member 1 in segment 0 overlaps another member at offset 8
func.func @pack_layout_overlap(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> tensor<?xf32> {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 8 : 8]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// A pack layout must cover its buffer: no gap between members.
// CHECK: layout segment 1 is not covered: gap [16, 20) before member 1
func.func @pack_layout_gap(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> tensor<?xf32> {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8], [0 : 16, 20 : 8]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// A pack layout must cover its buffer: no gap at the start of a segment.
// CHECK: layout segment 0 is not covered: gap [0, 4) before member 0
func.func @pack_layout_leading_gap(%x: tensor<?x4xi64>) -> tensor<?xi64> {
  %b = sparse.pack %x layout = #sparse.layout<[[4 : 4]]> : tensor<?x4xi64> -> tensor<?xi64>
  func.return %b : tensor<?xi64>
}

// -----

//===----------------------------------------------------------------------===//
// sparse.embedding_bag_collection
//===----------------------------------------------------------------------===//

// Table names are unique within a collection.
// CHECK: sparse.embedding_bag_collection: table 't0' is declared twice
func.func @ebc_table_twice(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t0", rows = 20, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// Per-sample weights scale ids within a pooled bag: an unpooled table has none.
// CHECK: sparse.embedding_bag_collection: feature 'f0' has per-sample weights but table 't0' is unpooled (weights scale ids within a pooled bag)
func.func @ebc_unpooled_weighted(%i: tensor<?xi64>, %o: tensor<?xi64>, %w: tensor<?xf32>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) weights(%w : tensor<?xf32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, none>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// A group's exchanges carry pooled vectors or unpooled rows: not both.
// CHECK: sparse.embedding_bag_collection: a group holds pooled and unpooled tables; their exchanges differ
func.func @ebc_pooled_and_unpooled(%i: tensor<?xi64>, %o: tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %p:2 = sparse.embedding_bag_collection "emb" ids(%i, %i : tensor<?xi64>, tensor<?xi64>) offsets(%o, %o : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, none>, #sparse.table<"t1", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>, #sparse.placement<"t1", data_parallel>] -> tensor<?x4xf32>, tensor<?x4xf32>
  func.return %p#0, %p#1 : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// Feature names are unique within a collection.
// CHECK: sparse.embedding_bag_collection: feature 'f0' is listed twice
func.func @ebc_feature_twice(%i: tensor<?xi64>, %o: tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %p:2 = sparse.embedding_bag_collection "emb" ids(%i, %i : tensor<?xi64>, tensor<?xi64>) offsets(%o, %o : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f0" -> "t0", pooling_factor = 2.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>, tensor<?x4xf32>
  func.return %p#0, %p#1 : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// A feature must read a table of the collection.
// CHECK: sparse.embedding_bag_collection: feature 'f1' maps to missing table 't9'
func.func @ebc_feature_missing_table(%i: tensor<?xi64>, %o: tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %p:2 = sparse.embedding_bag_collection "emb" ids(%i, %i : tensor<?xi64>, tensor<?xi64>) offsets(%o, %o : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t9", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>, tensor<?x4xf32>
  func.return %p#0, %p#1 : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// A placement must name a table of the collection.
// CHECK: sparse.embedding_bag_collection: placement names unknown table 't1'
func.func @ebc_placement_unknown_table(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>, #sparse.placement<"t1", table_wise, rank = 0>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// A table is placed once.
// CHECK: sparse.embedding_bag_collection: table 't0' is placed twice in this group
func.func @ebc_table_placed_twice(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t0", table_wise, rank = 1>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// Every table of the collection is placed.
// CHECK: sparse.embedding_bag_collection: table 't1' is not placed in this group
func.func @ebc_table_not_placed(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// One ids, offsets and result per feature.
// CHECK: module 'emb': 2 features need 2 ids, offsets and results, got 2, 2 and 1
func.func @ebc_result_count(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i, %i : tensor<?xi64>, tensor<?xi64>) offsets(%o, %o : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// One weight operand per weighted feature.
// CHECK: module 'emb': 1 weighted features need 1 weight operands, got 0
func.func @ebc_missing_weights(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// ids are 1-D integers.
// CHECK: ids of feature 'f0' must be a 1-D integer tensor, got tensor<?xf32>
func.func @ebc_float_ids(%i: tensor<?xf32>, %o: tensor<?xi64>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xf32>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// offsets are 1-D integers.
// CHECK: offsets of feature 'f0' must be a 1-D integer tensor, got tensor<?x2xi64>
func.func @ebc_2d_offsets(%i: tensor<?xi64>, %o: tensor<?x2xi64>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?x2xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

// A pooled result is 2-D.
// CHECK: pooled result of feature 'f0' must be 2-D [bags, dim], got tensor<?xf32>
func.func @ebc_1d_result(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?xf32>
  func.return %p : tensor<?xf32>
}

// -----

// The pooled result has the table's dtype.
// CHECK: pooled result of feature 'f1' has dtype f32 but table 't1' has dtype f16
func.func @ebc_result_dtype(%i: tensor<?xi64>, %o: tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?x8xf32>) {
  %p:2 = sparse.embedding_bag_collection "emb" ids(%i, %i : tensor<?xi64>, tensor<?xi64>) offsets(%o, %o : tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>, #sparse.table<"t1", rows = 10, dim = 8, f16, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>, #sparse.placement<"t1", data_parallel>] -> tensor<?x4xf32>, tensor<?x8xf32>
  func.return %p#0, %p#1 : tensor<?x4xf32>, tensor<?x8xf32>
}

// -----

// The pooled result's width is a multiple of the table's dim.
// CHECK: pooled result of feature 'f0' has width 12 but table 't0' has dim 16
func.func @ebc_result_width_not_multiple(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x12xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 16, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x12xf32>
  func.return %p : tensor<?x12xf32>
}

// -----

// One feature's pooled result has exactly the table's dim.
// CHECK: pooled result of feature 'f0' has width 32 but table 't0' has dim 16
func.func @ebc_result_width(%i: tensor<?xi64>, %o: tensor<?xi64>) -> tensor<?x32xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 16, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x32xf32>
  func.return %p : tensor<?x32xf32>
}

// -----

// Per-sample weights are 1-D floats.
// CHECK: per-sample weights must be a 1-D float tensor, got tensor<?xi32>
func.func @ebc_int_weights(%i: tensor<?xi64>, %o: tensor<?xi64>, %w: tensor<?xi32>) -> tensor<?x4xf32> {
  %p = sparse.embedding_bag_collection "emb" ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) weights(%w : tensor<?xi32>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>] placements = [#sparse.placement<"t0", data_parallel>] -> tensor<?x4xf32>
  func.return %p : tensor<?x4xf32>
}

// -----

//===----------------------------------------------------------------------===//
// sparse.route
//===----------------------------------------------------------------------===//

// One ids and offsets operand per feature.
// CHECK: sparse.route: 2 features need 2 ids and offsets operands
func.func @route_operand_count(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

// One weight operand per weighted feature.
// CHECK: sparse.route: 0 weighted features need 0 weight operands
func.func @route_extra_weights(%i: tensor<?xi64>, %o: tensor<?xi64>, %w: tensor<?xf32>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) weights(%w : tensor<?xf32>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

// Routed weights exist exactly when a feature is weighted.
// CHECK: sparse.route: routed weights are produced exactly when a feature is weighted
func.func @route_weights_result_without_weighted(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp, %rw = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>, tensor<?xf32>
  func.return
}

// -----

// Every routed feature's table needs a placement.
// CHECK: sparse.route: feature 'f1' maps to table 't1', which has no placement
func.func @route_unplaced_table(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i, %i : tensor<?xi64>, tensor<?xi64>) offsets(%o, %o : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

// ids and offsets are 1-D integers.
// CHECK: sparse.route operand must be a 1-D integer tensor, got tensor<?xf32>
func.func @route_float_offsets(%i: tensor<?xi64>, %o: tensor<?xf32>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xf32>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

// Routed lengths are 1-D integers.
// CHECK: routed lengths must be a 1-D integer tensor, got tensor<?xf32>
func.func @route_float_lengths(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xf32>, tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

// Routed indices are 1-D integers.
// CHECK: routed indices must be a 1-D integer tensor, got tensor<?x2xi64>
func.func @route_2d_indices(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?x2xi64>, tensor<2xi64>
  func.return
}

// -----

// Routed splits are 1-D integers.
// CHECK: routed splits must be a 1-D integer tensor, got tensor<2xf32>
func.func @route_float_splits(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xf32>
  func.return
}

// -----

// Routed splits have one entry per rank.
// CHECK: routed splits must have one entry per rank (2), got tensor<3xi64>
func.func @route_splits_size(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<3xi64>
  func.return
}

// -----

// Routed weights are 1-D floats.
// CHECK: routed weights must be a 1-D float tensor, got tensor<?xi32>
func.func @route_int_routed_weights(%i: tensor<?xi64>, %o: tensor<?xi64>, %w: tensor<?xf32>) {
  %l, %ix, %sp, %rw = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) weights(%w : tensor<?xf32>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>, tensor<?xi32>
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// sparse.lookup / sparse.lookup_update
//===----------------------------------------------------------------------===//

// The placement is for the table the lookup reads.
// CHECK: sparse.lookup: placement is for table 't1' but the op reads table 't0'
func.func @lookup_placement_other_table(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?x16xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// -----

// The placement is for the table the update writes.
// CHECK: sparse.lookup_update: placement is for table 't1' but the op reads table 't0'
func.func @lookup_update_placement_other_table(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16xf32>) {
  sparse.lookup_update %l, %i grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
  func.return
}

// -----

// A lookup serves at least one feature slot.
// CHECK: sparse.lookup of table 't0' serves no feature slot
func.func @lookup_no_slots(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?x16xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// -----

// Slots are distinct.
// CHECK: sparse.lookup of table 't0': slots must be distinct and non-negative
func.func @lookup_duplicate_slots(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?x32xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [1, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?x32xf32>
  func.return %p : tensor<?x32xf32>
}

// -----

// Slots are non-negative.
// CHECK: sparse.lookup_update of table 't0': slots must be distinct and non-negative
func.func @lookup_update_negative_slot(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16xf32>) {
  sparse.lookup_update %l, %i grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [-1] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
  func.return
}

// -----

// Lengths are 1-D integers.
// CHECK: lengths of table 't0' must be a 1-D integer tensor, got tensor<?xf32>
func.func @lookup_float_lengths(%l: tensor<?xf32>, %i: tensor<?xi64>) -> tensor<?x16xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xf32>, tensor<?xi64> -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// -----

// Indices are 1-D integers: input_indices given as f32.
// CHECK: indices of table 't0' must be a 1-D integer tensor, got tensor<?xf32>
func.func @lookup_float_indices(%l: tensor<?xi32>, %i: tensor<?xf32>) -> tensor<?x16xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xf32> -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// -----

// Indices are i32 or i64.
// CHECK: indices of table 't0' must be i32 or i64, got i16
func.func @lookup_i16_indices(%l: tensor<?xi32>, %i: tensor<?xi16>) -> tensor<?x16xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi16> -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// -----

// Weights are 1-D floats.
// CHECK: weights of table 't0' must be a 1-D float tensor, got tensor<?xi64>
func.func @lookup_int_weights(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xi64>) -> tensor<?x16xf32> {
  %p = sparse.lookup %l, %i weights %w : tensor<?xi64> table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  func.return %p : tensor<?x16xf32>
}

// -----

// The pooled result is 2-D.
// CHECK: pooled result of table 't0' must be 2-D [bags, dim], got tensor<?xf32>
func.func @lookup_1d_result(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>
  func.return %p : tensor<?xf32>
}

// -----

// dtype mismatch between the table and the lookup result.
// CHECK: pooled result of table 't0' has dtype bf16 but table 't0' has dtype f32
func.func @lookup_result_dtype(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?x16xbf16> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xbf16>
  func.return %p : tensor<?x16xbf16>
}

// -----

// dim mismatch between the table and the lookup result (not a multiple of dim).
// CHECK: pooled result of table 't0' has width 8 but table 't0' has dim 16
func.func @lookup_result_dim(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?x8xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  func.return %p : tensor<?x8xf32>
}

// -----

// The result is dim x number of slots wide.
// CHECK: pooled result of table 't0' has width 48, expected dim 16 x 2 slots = 32
func.func @lookup_result_width_slots(%l: tensor<?xi32>, %i: tensor<?xi64>) -> tensor<?x48xf32> {
  %p = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?x48xf32>
  func.return %p : tensor<?x48xf32>
}

// -----

// The gradient is 2-D.
// CHECK: gradient of table 't0' must be 2-D [bags, dim], got tensor<?x16x1xf32>
func.func @lookup_update_3d_grad(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16x1xf32>) {
  sparse.lookup_update %l, %i grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x16x1xf32>
  func.return
}

// -----

// dtype mismatch between the table and the gradient.
// CHECK: gradient of table 't0' has dtype f32 but table 't0' has dtype f16
func.func @lookup_update_grad_dtype(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16xf32>) {
  sparse.lookup_update %l, %i grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f16, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
  func.return
}

// -----

// dim mismatch between the table and the gradient (not a multiple of dim).
// CHECK: gradient of table 't0' has width 20 but table 't0' has dim 16
func.func @lookup_update_grad_dim(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x20xf32>) {
  sparse.lookup_update %l, %i grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x20xf32>
  func.return
}

// -----

// The gradient is dim x number of slots wide.
// CHECK: gradient of table 't0' has width 16, expected dim 16 x 2 slots = 32
func.func @lookup_update_grad_width_slots(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x16xf32>) {
  sparse.lookup_update %l, %i grad %g table = #sparse.table<"t0", rows = 100, dim = 16, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0, 1] optimizer = #sparse.optimizer<rowwise_adagrad> : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// sparse.lookup_grad / sparse.lookup_update (dense-gradient form)
//===----------------------------------------------------------------------===//

// The placement is for the table whose gradient is computed.
// CHECK: sparse.lookup_grad: placement is for table 't1' but the op reads table 't0'
func.func @lookup_grad_placement_other_table(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf32>) -> tensor<10x8xf32> {
  %tg = sparse.lookup_grad %l, %i grad %g table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32> -> tensor<10x8xf32>
  func.return %tg : tensor<10x8xf32>
}

// -----

// The incoming gradient has the table's dtype.
// CHECK: gradient of table 't0' has dtype f16 but table 't0' has dtype f32
func.func @lookup_grad_grad_dtype(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf16>) -> tensor<10x8xf32> {
  %tg = sparse.lookup_grad %l, %i grad %g table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf16> -> tensor<10x8xf32>
  func.return %tg : tensor<10x8xf32>
}

// -----

// The table gradient has the table's [rows, dim] shape.
// CHECK: table gradient of 't0' must have the table's shape [10, 8], got tensor<?x8xf32>
func.func @lookup_grad_table_grad_shape(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %tg = sparse.lookup_grad %l, %i grad %g table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32> -> tensor<?x8xf32>
  func.return %tg : tensor<?x8xf32>
}

// -----

// The table gradient has the table's dtype.
// CHECK: table gradient of 't0' has dtype bf16 but table 't0' has dtype f32
func.func @lookup_grad_table_grad_dtype(%l: tensor<?xi32>, %i: tensor<?xi64>, %g: tensor<?x8xf32>) -> tensor<10x8xbf16> {
  %tg = sparse.lookup_grad %l, %i grad %g table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32> -> tensor<10x8xbf16>
  func.return %tg : tensor<10x8xbf16>
}

// -----

// The placement is for the table that is updated.
// CHECK: sparse.lookup_update: placement is for table 't1' but the op updates table 't0'
func.func @dense_update_placement_other_table(%tg: tensor<10x8xf32>) {
  sparse.lookup_update grad %tg table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<10x8xf32>
  func.return
}

// -----

// The applied gradient has the table's [rows, dim] shape.
// CHECK: dense gradient of table 't0' must have the table's shape [10, 8], got tensor<8x10xf32>
func.func @dense_update_shape(%tg: tensor<8x10xf32>) {
  sparse.lookup_update grad %tg table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<8x10xf32>
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// sparse.pack / sparse.unpack
//===----------------------------------------------------------------------===//

// The layout describes every member of the pack.
// CHECK: sparse.pack: layout describes 1 members but the op has 2
func.func @pack_member_count(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> tensor<?xf32> {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// The layout describes every member of the unpack.
// CHECK: sparse.unpack: layout describes 2 members but the op has 1
func.func @unpack_member_count(%b: tensor<?xf32>) -> tensor<?x16xf32> {
  %x = sparse.unpack %b layout = #sparse.layout<[[0 : 16, 16 : 8]]> : tensor<?xf32> -> tensor<?x16xf32>
  func.return %x : tensor<?x16xf32>
}

// -----

// The packed buffer is 1-D.
// CHECK: sparse.pack: the packed buffer must be 1-D, got tensor<?x16xf32>
func.func @pack_2d_buffer(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %b = sparse.pack %x layout = #sparse.layout<[[0 : 16]]> : tensor<?x16xf32> -> tensor<?x16xf32>
  func.return %b : tensor<?x16xf32>
}

// -----

// Members are 1-D or 2-D.
// CHECK: sparse.unpack: member 0 must be 1-D or 2-D, got tensor<?x4x4xf32>
func.func @unpack_3d_member(%b: tensor<?xf32>) -> tensor<?x4x4xf32> {
  %x = sparse.unpack %b layout = #sparse.layout<[[0 : 16]]> : tensor<?xf32> -> tensor<?x4x4xf32>
  func.return %x : tensor<?x4x4xf32>
}

// -----

// A float member must have the buffer's exact element type.
// CHECK: sparse.pack: member 1 has element type f16, which the f32 buffer cannot hold exactly
func.func @pack_member_dtype(%x: tensor<?x16xf32>, %y: tensor<?x8xf16>) -> tensor<?xf32> {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8]]> : tensor<?x16xf32>, tensor<?x8xf16> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// An integer member may only be widened, never narrowed.
// CHECK: sparse.pack: member 0 has element type i64, which the i32 buffer cannot hold exactly
func.func @pack_member_narrowing(%x: tensor<?xi64>) -> tensor<?xi32> {
  %b = sparse.pack %x layout = #sparse.layout<[[? : ?]]> : tensor<?xi64> -> tensor<?xi32>
  func.return %b : tensor<?xi32>
}

// -----

// A jagged member is 1-D.
// CHECK: sparse.pack: jagged member 1 ('?' in the layout) must be 1-D, got tensor<?x4xi64>
func.func @pack_jagged_2d(%x: tensor<?xi64>, %y: tensor<?x4xi64>) -> tensor<?xi64> {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[? : ?, ? : ?]]> : tensor<?xi64>, tensor<?x4xi64> -> tensor<?xi64>
  func.return %b : tensor<?xi64>
}

// -----

// A static 2-D member gets a whole number of rows per sample.
// CHECK: sparse.unpack: member 0 has 16 columns but the layout gives it 8 per sample
func.func @unpack_member_columns(%b: tensor<?xf32>) -> tensor<?x16xf32> {
  %x = sparse.unpack %b layout = #sparse.layout<[[0 : 8]]> : tensor<?xf32> -> tensor<?x16xf32>
  func.return %x : tensor<?x16xf32>
}

// -----

// A 2-D member with no columns cannot fill a non-empty slot (used to crash the verifier with a
// ZeroDivisionError).
// CHECK: sparse.pack: member 0 has 0 columns but the layout gives it 4 per sample
func.func @pack_zero_column_member(%x: tensor<?x0xf32>) -> tensor<?xf32> {
  %b = sparse.pack %x layout = #sparse.layout<[[0 : 4]]> : tensor<?x0xf32> -> tensor<?xf32>
  func.return %b : tensor<?xf32>
}

// -----

// unpack must read as many segments as its pack wrote.
// CHECK: sparse.unpack does not match its sparse.pack: 1 segments are read but 2 were packed
func.func @unpack_other_segment_count(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 16 : 8], [0 : 16, 16 : 8]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  %u:2 = sparse.unpack %b layout = #sparse.layout<[[0 : 16, 16 : 8]]> : tensor<?xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  func.return %u#0, %u#1 : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// unpack must read each segment with the width its pack wrote (a different layout).
// CHECK: sparse.unpack does not match its sparse.pack: segment 1 holds 24 elements per sample but 16 are read
func.func @unpack_other_layout(%x: tensor<?x16xf32>, %y: tensor<?x8xf32>) -> tensor<?x16xf32> {
  %b = sparse.pack %x, %y layout = #sparse.layout<[[0 : 16, 0 : 0], [0 : 16, 16 : 8]]> : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?xf32>
  %u = sparse.unpack %b layout = #sparse.layout<[[0 : 16], [0 : 16]]> : tensor<?xf32> -> tensor<?x16xf32>
  func.return %u : tensor<?x16xf32>
}

// -----

// unpack must give back the member types that were packed.
// CHECK: sparse.unpack does not match its sparse.pack: member 0 was packed as tensor<?x16xf32> but is unpacked as tensor<?x8xf32>
func.func @unpack_other_member_types(%x: tensor<?x16xf32>) -> tensor<?x8xf32> {
  %b = sparse.pack %x layout = #sparse.layout<[[0 : 16]]> : tensor<?x16xf32> -> tensor<?xf32>
  %u = sparse.unpack %b layout = #sparse.layout<[[0 : 16]]> : tensor<?xf32> -> tensor<?x8xf32>
  func.return %u : tensor<?x8xf32>
}

// -----

//===----------------------------------------------------------------------===//
// sparse.permute
//===----------------------------------------------------------------------===//

// The order is a permutation of the inputs.
// CHECK: sparse.permute: order [0, 0] is not a permutation of 2 inputs
func.func @permute_not_permutation(%a: tensor<?x16xf32>, %b: tensor<?x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  %r:2 = sparse.permute %a, %b order = [0, 0] : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>, tensor<?x16xf32>
  func.return %r#0, %r#1 : tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// One result per input.
// CHECK: sparse.permute: order [1, 0] is not a permutation of 2 inputs
func.func @permute_result_count(%a: tensor<?x16xf32>, %b: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %r = sparse.permute %a, %b order = [1, 0] : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  func.return %r : tensor<?x16xf32>
}

// -----

// Result i has the type of input order[i].
// CHECK: sparse.permute: result 0 has type tensor<?x16xf32> but input 1 has tensor<?x8xf32>
func.func @permute_types(%a: tensor<?x16xf32>, %b: tensor<?x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %r:2 = sparse.permute %a, %b order = [1, 0] : tensor<?x16xf32>, tensor<?x8xf32> -> tensor<?x16xf32>, tensor<?x8xf32>
  func.return %r#0, %r#1 : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// The dense-gradient form of lookup_update takes no weights (they need lengths and indices).
// CHECK: sparse.lookup_update of table 't0': indices and weights need lengths
func.func @dense_update_with_weights(%tg: tensor<10x8xf32>, %w: tensor<?xf32>) {
  sparse.lookup_update weights %w : tensor<?xf32> grad %tg table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<10x8xf32>
  func.return
}


//===----------------------------------------------------------------------===//
// sparse.pack_ids / sparse.unpack_ids
//===----------------------------------------------------------------------===//

// -----

// pack_ids/unpack_ids: lengths must be i32.
// CHECK: sparse.pack_ids: lengths must be i32, got i64
func.func @pack_ids_i64_lengths(%l: tensor<?xi64>, %i: tensor<?xi64>) {
  %b, %s = sparse.pack_ids %l, %i features = [1, 1] : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

// pack_ids/unpack_ids: the buffer holds the widest member.
// CHECK: sparse.pack_ids: the packed buffer must be i64 (the widest member), got i32
func.func @pack_ids_narrow_buffer(%l: tensor<?xi32>, %i: tensor<?xi64>) {
  %b, %s = sparse.pack_ids %l, %i features = [1, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?xi32>, tensor<2xi64>
  func.return
}

// -----

// pack_ids/unpack_ids: weights are f32 (bit-cast into the buffer).
// CHECK: sparse.pack_ids: weights must be a 1-D f32 tensor (bit-cast into the buffer), got tensor<?xf16>
func.func @pack_ids_f16_weights(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xf16>) {
  %b, %s = sparse.pack_ids %l, %i weights %w : tensor<?xf16> features = [1, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

// pack_ids/unpack_ids: one size per rank.
// CHECK: sparse.unpack_ids: sizes must be tensor<2xi64> (one count per rank), got tensor<3xi64>
func.func @unpack_ids_sizes(%b: tensor<?xi64>, %s: tensor<3xi64>) {
  %l, %i = sparse.unpack_ids %b, %s features = [1, 1] : tensor<?xi64>, tensor<3xi64> -> tensor<?xi32>, tensor<?xi64>
  func.return
}

// -----

// pack_ids/unpack_ids: feature counts are non-negative.
// CHECK: sparse.unpack_ids: features must list a non-negative count per rank, got [1, -1]
func.func @unpack_ids_negative(%b: tensor<?xi64>, %s: tensor<2xi64>) {
  %l, %i = sparse.unpack_ids %b, %s features = [1, -1] : tensor<?xi64>, tensor<2xi64> -> tensor<?xi32>, tensor<?xi64>
  func.return
}

// -----

//===----------------------------------------------------------------------===//
// References to the enclosing sched.step: the tables its routes reach, their placements, the
// feature slots of each rank's segment, per-segment feature counts and group labels
//===----------------------------------------------------------------------===//

// A lookup on a table that no feature reaches (table and placement renamed together).
// CHECK: sparse.lookup of table 't9': no sparse.route of @unrouted_table routes a feature to table 't9' (no feature reads it)
sched.step @unrouted_table world_size = 2 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 1], [0, 1]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p = sparse.lookup %rl, %ri table = #sparse.table<"t9", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t9", table_wise, rank = 1> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// A lookup must place its table where the route does.
// CHECK: sparse.lookup of table 't0': placement #sparse.placement<"t0", table_wise, rank = 0> differs from #sparse.placement<"t0", table_wise, rank = 1> in the sparse.route of group 'g'
sched.step @placement_differs world_size = 2 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 1], [0, 1]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p = sparse.lookup %rl, %ri table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// Slots index the owner's segment: rank 1 holds f0 then f1, so t1's feature is slot 1.
// CHECK: sparse.lookup of table 't1': slots [0], but the sparse.route of group 'g' puts feature 'f1' of this table at slots [1] of rank 1's segment (2 features)
sched.step @wrong_slot world_size = 2 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[0, 2], [0, 2]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %p = sparse.lookup %rl, %ri table = #sparse.table<"t1", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 1> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// A slot beyond the owner's segment.
// CHECK: sparse.lookup_grad of table 't0': slots [3], but the sparse.route of group 'g' puts feature 'f0' of this table at slots [0] of rank 0's segment (1 feature)
sched.step @slot_beyond_segment world_size = 2 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %p = sparse.lookup %l, %ix table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p, %l, %ix : tensor<?x4xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb1(%g: tensor<?x4xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  %tg = sparse.lookup_grad %sl, %si grad %g table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [3] {group = "g"} : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32> -> tensor<10x4xf32>
  sched.yield
}

// -----

// Every op naming a table agrees on it: the update's table has other rows than the lookup's.
// CHECK: sparse.lookup_update of table 't0': #sparse.table<"t0", rows = 20, dim = 4, f32, sum> differs from #sparse.table<"t0", rows = 10, dim = 4, f32, sum> in the sparse.lookup of @table_differs
sched.step @table_differs world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %p = sparse.lookup %l, %ix table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p, %l, %ix : tensor<?x4xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb1(%g: tensor<?x4xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  sparse.lookup_update %sl, %si grad %g table = #sparse.table<"t0", rows = 20, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<sgd> {group = "g"} : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32>
  sched.yield
}

// -----

// A weighted feature's table reads the routed weights.
// CHECK: sparse.lookup of table 't0': table 't0' has weighted features but the op reads no weights
sched.step @weights_missing world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %w0: tensor<?xf32>):
  %l, %ix, %sp, %rw = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) weights(%w0 : tensor<?xf32>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>, tensor<?xf32>
  %p = sparse.lookup %l, %ix table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// ... and an unweighted one reads none.
// CHECK: sparse.lookup of table 't1': reads per-sample weights but no feature of table 't1' is weighted
sched.step @weights_extra world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %w0: tensor<?xf32>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp, %rw = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) weights(%w0 : tensor<?xf32>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0, weighted>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>, tensor<?xf32>
  %p = sparse.lookup %l, %ix weights %rw : tensor<?xf32> table = #sparse.table<"t1", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 0> slots = [1] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// A lookup reads the buffers of the route that routes its table, not another group's.
// CHECK: sparse.lookup of table 't0': its lengths come from the sparse.route of group 'b', which does not route table 't0' (the sparse.route of group 'a' does)
sched.step @other_groups_lengths world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %la, %ia, %sa = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "a"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %lb, %ib, %sb = sparse.route ids(%i1 : tensor<?xi64>) offsets(%o1 : tensor<?xi64>) features = [#sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t1", table_wise, rank = 0>] world_size = 1 {group = "b"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %p = sparse.lookup %lb, %ib table = #sparse.table<"t0", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {group = "a"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// The dense-gradient update of a replicated table names a routed table too.
// CHECK: sparse.lookup_update of table 't9': no sparse.route of @dense_update_unrouted routes a feature to table 't9' (no feature reads it)
sched.step @dense_update_unrouted world_size = 2 outputs = 0 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %tg: tensor<10x4xf32>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", data_parallel>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  sparse.lookup_update grad %tg table = #sparse.table<"t9", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"t9", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> {group = "g"} : tensor<10x4xf32>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// A route's world size is its step's.
// CHECK: sparse.route: world_size = 4 but @route_world_differs has world_size = 2
sched.step @route_world_differs world_size = 2 outputs = 0 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>] world_size = 4 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<4xi64>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// A table belongs to one group: two routes reaching it conflict.
// CHECK: sparse.route: table 't0' is also in the sparse.route of group 'a'; a table belongs to one sharding group
sched.step @table_in_two_routes world_size = 1 outputs = 0 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %la, %ia, %sa = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "a"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %lb, %ib, %sb = sparse.route ids(%i1 : tensor<?xi64>) offsets(%o1 : tensor<?xi64>) features = [#sparse.feature<"f1" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "b"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// Two opaque collections declaring one table conflict the same way.
// CHECK: sparse.embedding_bag_collection: table 't0' is also in the sparse.embedding_bag_collection 'a'; a table belongs to one sharding group
sched.step @table_in_two_collections world_size = 1 outputs = 2 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %p0 = sparse.embedding_bag_collection "a" ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x4xf32>
  %p1 = sparse.embedding_bag_collection "b" ids(%i1 : tensor<?xi64>) offsets(%o1 : tensor<?xi64>) tables = [#sparse.table<"t0", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f1" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] -> tensor<?x4xf32>
  sched.yield %p0, %p1 : tensor<?x4xf32>, tensor<?x4xf32>
} backward {
^bb1(%g0: tensor<?x4xf32>, %g1: tensor<?x4xf32>):
  sched.yield
}

// -----

// A route lists each feature once ...
// CHECK: sparse.route: feature 'f0' is listed twice
func.func @route_feature_twice(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i, %i : tensor<?xi64>, tensor<?xi64>) offsets(%o, %o : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  func.return
}

// -----

// ... and places each table once.
// CHECK: sparse.route: table 't0' is placed twice
func.func @route_placement_twice(%i: tensor<?xi64>, %o: tensor<?xi64>) {
  %l, %ix, %sp = sparse.route ids(%i : tensor<?xi64>) offsets(%o : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t0", table_wise, rank = 1>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  func.return
}

// -----

// A pack's (or unpack's) on_rank is a rank of the step.
// CHECK: sparse.pack: on_rank 2 is out of range for world size 2
sched.step @pack_rank_out_of_world world_size = 2 outputs = 1 {
^bb0(%a: tensor<?x4xf32>):
  %b = sparse.pack %a layout = #sparse.layout<[[0 : 4], [0 : 4]]> on_rank 2 : tensor<?x4xf32> -> tensor<?xf32>
  sched.yield %b : tensor<?xf32>
} backward {
^bb1(%g: tensor<?xf32>):
  sched.yield
}

// -----

// CHECK: sparse.unpack: on_rank 3 is out of range for world size 2
sched.step @unpack_rank_out_of_world world_size = 2 outputs = 1 {
^bb0(%b: tensor<?xf32>):
  %a = sparse.unpack %b layout = #sparse.layout<[[0 : 4], [0 : 4]]> on_rank 3 : tensor<?xf32> -> tensor<?x4xf32>
  sched.yield %a : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// An unpack of an all-to-all's result reads one segment per peer ...
// CHECK: sparse.unpack: its layout has 1 segment but the coll.all_to_all it reads exchanges with 2 ranks
sched.step @unpack_segments_differ world_size = 2 outputs = 1 {
^bb0(%b: tensor<?xf32>):
  %r = coll.all_to_all %b on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[4, 4], [4, 4]]> : tensor<?xf32> -> tensor<?xf32>
  %a = sparse.unpack %r layout = #sparse.layout<[[0 : 4]]> : tensor<?xf32> -> tensor<?x4xf32>
  sched.yield %a : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// ... each as wide as that peer sent to the rank unpacking it.
// CHECK: sparse.unpack: segment 1 holds 4 elements per sample, but the coll.all_to_all's splits send 8 from rank 1 to rank 0
sched.step @unpack_width_differs world_size = 2 outputs = 1 {
^bb0(%b: tensor<?xf32>):
  %r = coll.all_to_all %b on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[4, 4], [8, 8]]> : tensor<?xf32> -> tensor<?xf32>
  %a = sparse.unpack %r layout = #sparse.layout<[[0 : 4], [0 : 4]]> on_rank 0 : tensor<?xf32> -> tensor<?x4xf32>
  sched.yield %a : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}

// -----

// Packed ids hold, per destination, the features the route serves there.
// CHECK: sparse.pack_ids: features = [1, 1], but the sparse.route of group 'g' sends [0, 2] features per sample to ranks 0..1
sched.step @pack_ids_counts_differ world_size = 2 outputs = 0 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %buf, %sizes = sparse.pack_ids %l, %ix features = [1, 1] : tensor<?xi32>, tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// CHECK: sparse.unpack_ids: features = [0, 1], but the sparse.route of group 'g' sends [0, 2] features per sample to ranks 0..1
sched.step @unpack_ids_counts_differ world_size = 2 outputs = 0 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1 : tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 1>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %buf, %sizes = sparse.pack_ids %l, %ix features = [0, 2] : tensor<?xi32>, tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %rb, %rsz = coll.all_to_all %buf on #coll.group<[0, 1]> role #coll.role<input_packed> send_splits(%sizes : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %rl, %ri = sparse.unpack_ids %rb, %rsz features = [0, 1] : tensor<?xi64>, tensor<2xi64> -> tensor<?xi32>, tensor<?xi64>
  sched.yield
} backward {
^bb1:
  sched.yield
}

// -----

// A group label names a sharding group that a route of the step defines.
// CHECK: sparse.permute: group 'h' is not a sharding group of @unknown_group_label (its routes define 'g')
sched.step @unknown_group_label world_size = 1 outputs = 1 {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %a: tensor<?x4xf32>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>] world_size = 1 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<1xi64>
  %b = sparse.permute %a order = [0] {group = "g+h"} : tensor<?x4xf32> -> tensor<?x4xf32>
  sched.yield %b : tensor<?x4xf32>
} backward {
^bb1(%g: tensor<?x4xf32>):
  sched.yield
}
