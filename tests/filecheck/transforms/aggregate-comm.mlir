// RUN: sparselift-opt %s --split-input-file -p aggregate-comm | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'aggregate-comm{roles=dense_grad}' | filecheck %s --check-prefix=ROLES
// RUN: sparselift-opt %s --split-input-file -p 'aggregate-comm{max-bytes=100}' | filecheck %s --check-prefix=CAP
// RUN: not sparselift-opt %s -p 'aggregate-comm{roles=input_indices}' 2>&1 | filecheck %s --check-prefix=BADROLE
// RUN: sparselift-opt %S/../inputs/torchrec-ebc-ws2.mlir -p lift-sparse,aggregate-comm | filecheck %s --check-prefix=TORCHREC

// BADROLE: aggregate-comm: cannot aggregate role 'input_indices'; supported: sparse_grad, dense_grad

// Two replicated groups' gradient all-reduces become one; the update that used the first
// one's result moves after the merged collective.
// CHECK-LABEL: sched.step @two_groups
// CHECK:       %[[A:[0-9a-z_]+]] = sparse.lookup_grad {{.*}} table = #sparse.table<"a"
// CHECK:       %[[B:[0-9a-z_]+]] = sparse.lookup_grad {{.*}} table = #sparse.table<"b"
// CHECK-NEXT:  %[[RA:[0-9a-z_]+]], %[[RB:[0-9a-z_]+]] = coll.all_reduce %[[A]], %[[B]] on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "ga+gb"} : tensor<10x4xf32>, tensor<6x4xf32> -> tensor<10x4xf32>, tensor<6x4xf32>
// CHECK-NEXT:  sparse.lookup_update grad %[[RA]] table = #sparse.table<"a"
// CHECK-NEXT:  sparse.lookup_update grad %[[RB]] table = #sparse.table<"b"
// CHECK-NOT:   coll.all_reduce
// ROLES-LABEL: sched.step @two_groups
// ROLES-COUNT-2: coll.all_reduce {{.*}} role #coll.role<sparse_grad>
// CAP-LABEL:   sched.step @two_groups
// CAP:         coll.all_reduce %{{.*}} role #coll.role<sparse_grad> reduce "sum" {group = "ga"}
// CAP:         coll.all_reduce %{{.*}} role #coll.role<sparse_grad> reduce "sum" {group = "gb", remark = "aggregate-comm: not merged: the merged buffer would hold 256 bytes, over max-bytes 100"}
sched.step @two_groups world_size = 2 outputs = 0 {
^bb0(%fl: tensor<?xi32>, %fi: tensor<?xi64>, %fa: tensor<?x4xf32>, %fb: tensor<?x4xf32>):
  sched.yield %fl, %fi, %fa, %fb : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32>, tensor<?x4xf32>
} backward {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %ga: tensor<?x4xf32>, %gb: tensor<?x4xf32>):
  %a = sparse.lookup_grad %l, %i grad %ga table = #sparse.table<"a", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"a", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32> -> tensor<10x4xf32>
  %ra = coll.all_reduce %a on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "ga"} : tensor<10x4xf32> -> tensor<10x4xf32>
  sparse.lookup_update grad %ra table = #sparse.table<"a", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"a", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd, lr = 0.1> : tensor<10x4xf32>
  %b = sparse.lookup_grad %l, %i grad %gb table = #sparse.table<"b", rows = 6, dim = 4, f32, sum> placement = #sparse.placement<"b", data_parallel> slots = [1] : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32> -> tensor<6x4xf32>
  %rb = coll.all_reduce %b on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "gb"} : tensor<6x4xf32> -> tensor<6x4xf32>
  sparse.lookup_update grad %rb table = #sparse.table<"b", rows = 6, dim = 4, f32, sum> placement = #sparse.placement<"b", data_parallel> slots = [1] optimizer = #sparse.optimizer<sgd, lr = 0.1> : tensor<6x4xf32>
  sched.yield
}

// -----

// Different reductions are not merged; the later op says why.
// CHECK-LABEL: sched.step @reductions_differ
// CHECK:       coll.all_reduce %a {{.*}} reduce "sum"
// CHECK:       coll.all_reduce %b {{.*}} reduce "mean" {remark = "aggregate-comm: not merged with an earlier collective: reductions differ"}
sched.step @reductions_differ world_size = 2 outputs = 0 {
^bb0(%a: tensor<8xf32>, %b: tensor<8xf32>):
  %ra = coll.all_reduce %a on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<8xf32> -> tensor<8xf32>
  %rb = coll.all_reduce %b on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "mean" : tensor<8xf32> -> tensor<8xf32>
  sched.yield %ra, %rb : tensor<8xf32>, tensor<8xf32>
} backward {
^bb0(%ga: tensor<8xf32>, %gb: tensor<8xf32>):
  sched.yield
}

// -----

// Different groups are not merged.
// CHECK-LABEL: sched.step @groups_differ
// CHECK:       coll.all_reduce %a on #coll.group<[0, 1]>
// CHECK:       coll.all_reduce %b on #coll.group<[1, 2]> {{.*}} {remark = "aggregate-comm: not merged with an earlier collective: different groups"}
sched.step @groups_differ world_size = 3 outputs = 0 {
^bb0(%a: tensor<8xf32>, %b: tensor<8xf32>):
  %ra = coll.all_reduce %a on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<8xf32> -> tensor<8xf32>
  %rb = coll.all_reduce %b on #coll.group<[1, 2]> role #coll.role<dense_grad> reduce "sum" : tensor<8xf32> -> tensor<8xf32>
  sched.yield %ra, %rb : tensor<8xf32>, tensor<8xf32>
} backward {
^bb0(%ga: tensor<8xf32>, %gb: tensor<8xf32>):
  sched.yield
}

// -----

// The second all-reduce reads the first one's result: merging would create a cycle.
// CHECK-LABEL: sched.step @dependent
// CHECK:       %[[R:.*]] = coll.all_reduce %a
// CHECK:       coll.all_reduce %[[R]] {{.*}} {remark = "aggregate-comm: not merged: the collectives depend on each other (merging would create a cycle)"}
sched.step @dependent world_size = 2 outputs = 0 {
^bb0(%a: tensor<8xf32>):
  %ra = coll.all_reduce %a on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<8xf32> -> tensor<8xf32>
  %rb = coll.all_reduce %ra on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<8xf32> -> tensor<8xf32>
  sched.yield %rb : tensor<8xf32>
} backward {
^bb0(%g: tensor<8xf32>):
  sched.yield
}

// -----

// An op between them uses the first result and feeds the second: no consistent order exists.
// CHECK-LABEL: sched.step @ordering
// CHECK:       coll.all_reduce %{{.*}} {remark = "aggregate-comm: not merged: the collectives depend on each other (merging would create a cycle)"}
sched.step @ordering world_size = 2 outputs = 0 {
^bb0(%a: tensor<8xf32>, %b: tensor<8xf32>):
  %ra = coll.all_reduce %a on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<8xf32> -> tensor<8xf32>
  %m = sparse.permute %ra order = [0] : tensor<8xf32> -> tensor<8xf32>
  %rb = coll.all_reduce %m on #coll.group<[0, 1]> role #coll.role<dense_grad> reduce "sum" : tensor<8xf32> -> tensor<8xf32>
  sched.yield %rb : tensor<8xf32>
} backward {
^bb0(%g: tensor<8xf32>):
  sched.yield
}

// TORCHREC:      } backward {
// TORCHREC:      coll.all_reduce %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "weighted_ebc/data_parallel+ebc/data_parallel"}
// TORCHREC-NOT:  coll.all_reduce
