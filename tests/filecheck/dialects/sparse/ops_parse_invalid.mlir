// RUN: sparselift-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// Every segment of a layout lists the same members.
// CHECK: every segment of a layout must list the same members
func.func @layout_ragged() attributes {l = #sparse.layout<[[0 : 4, 4 : 4], [0 : 8]]>} {
  func.return
}

// -----

// pooling_factor is a number.
// CHECK: expected a number
func.func @feature_pooling_factor_not_number() attributes {f = #sparse.feature<"f0" -> "t0", pooling_factor = high>} {
  func.return
}

// -----

// The only flag a feature takes is `weighted`.
// CHECK: Expected 'weighted'
func.func @feature_bad_flag() attributes {f = #sparse.feature<"f0" -> "t0", pooling_factor = 1.0, unweighted>} {
  func.return
}

// -----

// Hyperparameters are run-time values (sparse_optimizer.param_groups), not IR: an old `lr =`
// says so.
// CHECK: expected 'group', got 'lr': hyperparameters such as lr are run-time values
func.func @optimizer_lr_in_ir() attributes {o = #sparse.optimizer<sgd, lr = 0.1>} {
  func.return
}

// -----

// A group is an integer.
// CHECK: Expected integer literal
func.func @optimizer_group_not_number() attributes {o = #sparse.optimizer<adam, group = first>} {
  func.return
}

// -----

// A table spells out `rows = N`.
// CHECK: Expected 'rows'
func.func @table_missing_rows() attributes {t = #sparse.table<"t0", dim = 16, f32, sum>} {
  func.return
}

// -----

// A table_wise placement names its rank.
// CHECK: Expected 'rank'
func.func @placement_table_wise_no_rank() attributes {p = #sparse.placement<"t0", table_wise, ranks = [0]>} {
  func.return
}

// -----

// A data_parallel placement takes no ranks.
// CHECK: '>' expected
func.func @placement_data_parallel_rank() attributes {p = #sparse.placement<"t0", data_parallel, rank = 0>} {
  func.return
}

// -----

// A table name is a string literal.
// CHECK: string literal expected for the table name
func.func @table_name_not_string() attributes {t = #sparse.table<t0, rows = 10, dim = 4, f32, sum>} {
  func.return
}

// -----

// The pooling mode is an identifier.
// CHECK: identifier expected for the pooling mode
func.func @table_pooling_string() attributes {t = #sparse.table<"t0", rows = 10, dim = 4, f32, "sum">} {
  func.return
}

// -----

// A feature name is a string literal.
// CHECK: string literal expected for the feature name
func.func @feature_name_not_string() attributes {f = #sparse.feature<f0 -> "t0", pooling_factor = 1.0>} {
  func.return
}

// -----

// The table a feature reads is a string literal.
// CHECK: string literal expected for the table name
func.func @feature_table_not_string() attributes {f = #sparse.feature<"f0" -> t0, pooling_factor = 1.0>} {
  func.return
}

// -----

// A placement names its table with a string literal.
// CHECK: string literal expected for the table name
func.func @placement_table_not_string() attributes {p = #sparse.placement<t0, data_parallel>} {
  func.return
}

// -----

// The placement kind is an identifier.
// CHECK: identifier expected for the placement kind
func.func @placement_kind_string() attributes {p = #sparse.placement<"t0", "row_wise">} {
  func.return
}

// -----

// The optimizer kind is an identifier.
// CHECK: identifier expected for the optimizer kind
func.func @optimizer_no_kind() attributes {o = #sparse.optimizer<"sgd">} {
  func.return
}
