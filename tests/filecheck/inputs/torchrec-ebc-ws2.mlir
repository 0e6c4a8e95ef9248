builtin.module {
  sched.step @step world_size = 2 outputs = 1 attributes {batch = "8", model = "TorchRecEBCModel"} {
  ^bb0(%0: tensor<?x8xf32>, %1: tensor<?xi64>, %2: tensor<?xf32>, %3: tensor<?xi64>):
    %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14 = sched.dense @sparse_inputs(%1, %2, %3) phase "forward" : (tensor<?xi64>, tensor<?xf32>, tensor<?xi64>) -> (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xf32>)
    %15 = sched.dense @dense_pre(%0) phase "forward" {flops = 12288 : i64} : (tensor<?x8xf32>) -> tensor<?x16xf32>
    %16, %17, %18, %19 = sparse.embedding_bag_collection "ebc" ids(%4, %6, %8, %10 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) offsets(%5, %7, %9, %11 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) tables = [#sparse.table<"ebc.embedding_bags.t_shared", rows = 1000, dim = 16, f32, sum>, #sparse.table<"ebc.embedding_bags.t_c", rows = 500, dim = 16, f32, mean>, #sparse.table<"ebc.embedding_bags.t_d", rows = 200, dim = 8, f32, sum>] features = [#sparse.feature<"f_a" -> "ebc.embedding_bags.t_shared", pooling_factor = 2.25>, #sparse.feature<"f_b" -> "ebc.embedding_bags.t_shared", pooling_factor = 2.875>, #sparse.feature<"f_c" -> "ebc.embedding_bags.t_c", pooling_factor = 2.625>, #sparse.feature<"f_d" -> "ebc.embedding_bags.t_d", pooling_factor = 1.375>] placements = [#sparse.placement<"ebc.embedding_bags.t_shared", data_parallel>, #sparse.placement<"ebc.embedding_bags.t_c", data_parallel>, #sparse.placement<"ebc.embedding_bags.t_d", data_parallel>] {group = "ebc/data_parallel"} -> tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x8xf32>
    %20 = sparse.embedding_bag_collection "weighted_ebc" ids(%12 : tensor<?xi64>) offsets(%13 : tensor<?xi64>) weights(%14 : tensor<?xf32>) tables = [#sparse.table<"weighted_ebc.embedding_bags.t_w", rows = 300, dim = 8, f32, sum>] features = [#sparse.feature<"f_w" -> "weighted_ebc.embedding_bags.t_w", pooling_factor = 3.125, weighted>] placements = [#sparse.placement<"weighted_ebc.embedding_bags.t_w", data_parallel>] {group = "weighted_ebc/data_parallel"} -> tensor<?x8xf32>
    %21 = sched.dense @dense_post(%15, %16, %17, %18, %19, %20) phase "forward" {flops = 41472 : i64} : (tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x1xf32>
    sched.yield %21 : tensor<?x1xf32>
  } backward {
  ^bb0(%22: tensor<?x1xf32>):
    %23, %24, %25, %26, %27, %28 = sched.dense @dense_post(%22) phase "backward" {flops = 82944 : i64} : (tensor<?x1xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>)
    %29 = sched.dense @dense_pre(%23) phase "backward" {flops = 24576 : i64} : (tensor<?x16xf32>) -> tensor<?x8xf32>
    sched.yield
  }
}
