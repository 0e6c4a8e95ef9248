// RUN: sparselift-opt %s --split-input-file -p aggregate-comm | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'aggregate-comm{roles=dense_grad}' | filecheck %s --check-prefix=ROLES
// RUN: sparselift-opt %s --split-input-file -p 'aggregate-comm{roles=sparse_grad}' | filecheck %s --check-prefix=SPARSE
// RUN: sparselift-opt %s --split-input-file -p 'aggregate-comm{max-bytes=100}' | filecheck %s --check-prefix=CAP
// RUN: not sparselift-opt %s -p 'aggregate-comm{roles=input_indices}' 2>&1 | filecheck %s --check-prefix=BADROLE
// RUN: sparselift-opt %S/../inputs/torchrec-ebc-ws2.mlir -p lift-sparse,aggregate-comm | filecheck %s --check-prefix=TORCHREC
// RUN: sparselift-opt %S/../inputs/two-tower-ws2.mlir -p lift-sparse,aggregate-comm | filecheck %s --check-prefix=TOWERS

// BADROLE: aggregate-comm: cannot aggregate role 'input_indices'; supported: input, output_pooled, grad_pooled, output_rows, grad_rows, sparse_grad, dense_grad

// Two replicated groups' gradient all-reduces become one; the update that used the first
// one's result moves after the merged collective. With the `dense_grad` role (in the default
// roles) the merged all-reduce rides in the dense gradients' all-reduce: `with_dense_grads`.
// CHECK-LABEL: sched.step @two_groups
// CHECK:       %[[A:[0-9a-z_]+]] = sparse.lookup_grad {{.*}} table = #sparse.table<"a"
// CHECK:       %[[B:[0-9a-z_]+]] = sparse.lookup_grad {{.*}} table = #sparse.table<"b"
// CHECK-NEXT:  %[[RA:[0-9a-z_]+]], %[[RB:[0-9a-z_]+]] = coll.all_reduce %[[A]], %[[B]] on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" with_dense_grads {group = "ga+gb"} : tensor<10x4xf32>, tensor<6x4xf32> -> tensor<10x4xf32>, tensor<6x4xf32>
// CHECK-NEXT:  sparse.lookup_update grad %[[RA]] table = #sparse.table<"a"
// CHECK-NEXT:  sparse.lookup_update grad %[[RB]] table = #sparse.table<"b"
// CHECK-NOT:   coll.all_reduce
// `dense_grad` alone: not merged with each other, each rides with the dense gradients.
// ROLES-LABEL: sched.step @two_groups
// ROLES-COUNT-2: coll.all_reduce {{.*}} role #coll.role<sparse_grad> reduce "sum" with_dense_grads {group = "g{{a|b}}"}
// `sparse_grad` alone: merged, with a collective of its own.
// SPARSE-LABEL: sched.step @two_groups
// SPARSE:       coll.all_reduce %{{.*}}, %{{.*}} role #coll.role<sparse_grad> reduce "sum" {group = "ga+gb"}
// CAP-LABEL:   sched.step @two_groups
// CAP:         coll.all_reduce %{{.*}} role #coll.role<sparse_grad> reduce "sum" with_dense_grads {group = "ga"}
// CAP:         coll.all_reduce %{{.*}} role #coll.role<sparse_grad> reduce "sum" with_dense_grads {group = "gb", remark = #sched.remark<"aggregate-comm", "max-bytes", "not merged: the merged buffer would hold 256 bytes, over max-bytes 100">}
sched.step @two_groups world_size = 2 outputs = 0 {
^bb0(%fl: tensor<?xi32>, %fi: tensor<?xi64>, %fa: tensor<?x4xf32>, %fb: tensor<?x4xf32>):
  sched.yield %fl, %fi, %fa, %fb : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32>, tensor<?x4xf32>
} backward {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %ga: tensor<?x4xf32>, %gb: tensor<?x4xf32>):
  %a = sparse.lookup_grad %l, %i grad %ga table = #sparse.table<"a", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"a", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32> -> tensor<10x4xf32>
  %ra = coll.all_reduce %a on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "ga"} : tensor<10x4xf32> -> tensor<10x4xf32>
  sparse.lookup_update grad %ra table = #sparse.table<"a", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"a", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<10x4xf32>
  %b = sparse.lookup_grad %l, %i grad %gb table = #sparse.table<"b", rows = 6, dim = 4, f32, sum> placement = #sparse.placement<"b", data_parallel> slots = [1] : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32> -> tensor<6x4xf32>
  %rb = coll.all_reduce %b on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "gb"} : tensor<6x4xf32> -> tensor<6x4xf32>
  sparse.lookup_update grad %rb table = #sparse.table<"b", rows = 6, dim = 4, f32, sum> placement = #sparse.placement<"b", data_parallel> slots = [1] optimizer = #sparse.optimizer<sgd> : tensor<6x4xf32>
  sched.yield
}

// -----

// Different reductions are not merged; the later op says why.
// CHECK-LABEL: sched.step @reductions_differ
// CHECK:       coll.all_reduce %a {{.*}} reduce "sum"
// CHECK:       coll.all_reduce %b {{.*}} reduce "mean" {remark = #sched.remark<"aggregate-comm", "reduction", "not merged with an earlier collective: reductions differ">}
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
// CHECK:       coll.all_reduce %b on #coll.group<[1, 2]> {{.*}} {remark = #sched.remark<"aggregate-comm", "group", "not merged with an earlier collective: different groups">}
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
// CHECK:       coll.all_reduce %[[R]] {{.*}} {remark = #sched.remark<"aggregate-comm", "dependency", "not merged: the collectives depend on each other (merging would create a cycle)">}
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
// CHECK:       coll.all_reduce %{{.*}} {remark = #sched.remark<"aggregate-comm", "dependency", "not merged: the collectives depend on each other (merging would create a cycle)">}
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
// TORCHREC:      coll.all_reduce %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" with_dense_grads {group = "weighted_ebc/data_parallel+ebc/data_parallel"}
// TORCHREC-NOT:  coll.all_reduce

// -----

// Pooled outputs of two groups: one all-to-all, per-rank packs merged member-wise, one unpack
// reading both groups' members at shifted columns.
// CHECK-LABEL: sched.step @pooled_outputs
// CHECK:       %[[P0:[0-9a-z_]+]] = sparse.pack %a0, %b0 layout = #sparse.layout<{{\[\[}}0 : 8, 8 : 4], [0 : 8, 8 : 4]]> on_rank 0 {group = "ga+gb"}
// CHECK-NEXT:  %[[P1:[0-9a-z_]+]] = sparse.pack %a1, %b1 layout = #sparse.layout<{{\[\[}}0 : 16, 16 : 4], [0 : 16, 16 : 4]]> on_rank 1 {group = "ga+gb"}
// CHECK-NEXT:  %[[X:[0-9a-z_]+]] = coll.all_to_all %[[P0]], %[[P1]] on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}12, 12], [20, 20]]> {group = "ga+gb"}
// CHECK-NEXT:  %{{.*}} = sparse.unpack %[[X]] layout = #sparse.layout<{{\[\[}}0 : 8, 0 : 0, 8 : 4, 0 : 0], [0 : 0, 0 : 16, 0 : 0, 16 : 4]]>
// CHECK-NOT:   coll.all_to_all
sched.step @pooled_outputs world_size = 2 outputs = 4 {
^bb0(%a0: tensor<?x8xf32>, %a1: tensor<?x16xf32>, %b0: tensor<?x4xf32>, %b1: tensor<?x4xf32>):
  %pa0 = sparse.pack %a0 layout = #sparse.layout<[[0 : 8], [0 : 8]]> on_rank 0 {group = "ga"} : tensor<?x8xf32> -> tensor<?xf32>
  %pa1 = sparse.pack %a1 layout = #sparse.layout<[[0 : 16], [0 : 16]]> on_rank 1 {group = "ga"} : tensor<?x16xf32> -> tensor<?xf32>
  %xa = coll.all_to_all %pa0, %pa1 on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[8, 8], [16, 16]]> {group = "ga"} : tensor<?xf32>, tensor<?xf32> -> tensor<?xf32>
  %fa0, %fa1 = sparse.unpack %xa layout = #sparse.layout<[[0 : 8, 0 : 0], [0 : 0, 0 : 16]]> {group = "ga"} : tensor<?xf32> -> tensor<?x8xf32>, tensor<?x16xf32>
  %pb0 = sparse.pack %b0 layout = #sparse.layout<[[0 : 4], [0 : 4]]> on_rank 0 {group = "gb"} : tensor<?x4xf32> -> tensor<?xf32>
  %pb1 = sparse.pack %b1 layout = #sparse.layout<[[0 : 4], [0 : 4]]> on_rank 1 {group = "gb"} : tensor<?x4xf32> -> tensor<?xf32>
  %xb = coll.all_to_all %pb0, %pb1 on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[4, 4], [4, 4]]> {group = "gb"} : tensor<?xf32>, tensor<?xf32> -> tensor<?xf32>
  %fb0, %fb1 = sparse.unpack %xb layout = #sparse.layout<[[0 : 4, 0 : 0], [0 : 0, 0 : 4]]> {group = "gb"} : tensor<?xf32> -> tensor<?x4xf32>, tensor<?x4xf32>
  sched.yield %fa0, %fa1, %fb0, %fb1 : tensor<?x8xf32>, tensor<?x16xf32>, tensor<?x4xf32>, tensor<?x4xf32>
} backward {
^bb0(%g0: tensor<?x8xf32>, %g1: tensor<?x16xf32>, %g2: tensor<?x4xf32>, %g3: tensor<?x4xf32>):
  sched.yield
}

// -----

// A send buffer that no sparse.pack made has no layout to merge.
// CHECK-LABEL: sched.step @not_packed
// CHECK:       coll.all_to_all %x {{.*}} {remark = #sched.remark<"aggregate-comm", "layout", "not merged: a send buffer is not made by sparse.pack (layout mapping not computable)">}
sched.step @not_packed world_size = 2 outputs = 2 {
^bb0(%x: tensor<?xf32>, %y: tensor<?x4xf32>):
  %py = sparse.pack %y layout = #sparse.layout<[[0 : 4], [0 : 4]]> : tensor<?x4xf32> -> tensor<?xf32>
  %a = coll.all_to_all %py on #coll.group<[0, 1]> role #coll.role<grad_pooled> splits #coll.splits<[[4, 4], [4, 4]]> : tensor<?xf32> -> tensor<?xf32>
  %ua = sparse.unpack %a layout = #sparse.layout<[[0 : 4], [0 : 4]]> : tensor<?xf32> -> tensor<?x4xf32>
  %b = coll.all_to_all %x on #coll.group<[0, 1]> role #coll.role<grad_pooled> splits #coll.splits<[[4, 4], [4, 4]]> : tensor<?xf32> -> tensor<?xf32>
  sched.yield %ua, %b : tensor<?x4xf32>, tensor<?xf32>
} backward {
^bb0(%g0: tensor<?x4xf32>, %g1: tensor<?xf32>):
  sched.yield
}

// TOWERS:        coll.all_to_all %{{[0-9]+}}, %{{[0-9]+}} on #coll.group<[0, 1]> role #coll.role<output_pooled> {{.*}} {group = "user/table_wise+item/table_wise"}
// TOWERS-NOT:    role #coll.role<output_pooled>
// TOWERS:        } backward {
// TOWERS:        coll.all_to_all %{{[0-9]+}} on #coll.group<[0, 1]> role #coll.role<grad_pooled> {{.*}} {group = "item/table_wise+user/table_wise"}
// TOWERS-NOT:    role #coll.role<grad_pooled>

// -----

// A replicated table's gradient whose sum feeds anything but its update cannot wait for the
// dense gradients at the end of backward: left with a collective of its own, with the remark.
// CHECK-LABEL: sched.step @sum_read_elsewhere
// CHECK:       coll.all_reduce %{{.*}} role #coll.role<sparse_grad> reduce "sum" {group = "ga", remark = #sched.remark<"aggregate-comm", "dependency", "not merged with the dense gradients: its results feed coll.all_reduce, which cannot wait for the end of backward">}
// CHECK:       coll.all_reduce %{{.*}} role #coll.role<sparse_grad> reduce "sum" with_dense_grads
sched.step @sum_read_elsewhere world_size = 2 outputs = 0 {
^bb0(%fl: tensor<?xi32>, %fi: tensor<?xi64>, %fa: tensor<?x4xf32>):
  sched.yield %fl, %fi, %fa : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32>
} backward {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %ga: tensor<?x4xf32>):
  %a = sparse.lookup_grad %l, %i grad %ga table = #sparse.table<"a", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"a", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32> -> tensor<10x4xf32>
  %ra = coll.all_reduce %a on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "ga"} : tensor<10x4xf32> -> tensor<10x4xf32>
  %rra = coll.all_reduce %ra on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" {group = "ga"} : tensor<10x4xf32> -> tensor<10x4xf32>
  sparse.lookup_update grad %rra table = #sparse.table<"a", rows = 10, dim = 4, f32, sum> placement = #sparse.placement<"a", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<10x4xf32>
  sched.yield
}

// -----

// Exchanges sized at run time (rows one per id) merge with a static one of the same direction
// into one dynamic exchange (merge_dynamic.py); one whose receive sizes are exchanged at run
// time (no recv_splits) cannot: its sizes would be needed before the merged exchange.
// CHECK-LABEL: sched.step @dynamic_pairs
// CHECK:       %[[SEND:[0-9]+]], %[[RECV:[0-9]+]] = sparse.static_sizes splits #coll.splits<{{\[\[}}4, 4], [4, 4]]> role #coll.role<output_pooled>
// CHECK-NEXT:  %[[BUF:[0-9]+]], %[[BS:[0-9]+]], %[[BR:[0-9]+]] = sparse.join_segments(%rows) (%pk) send(%sizes, %[[SEND]]) recv(%back, %[[RECV]])
// CHECK-NEXT:  %[[GOT:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[BUF]] on #coll.group<[0, 1]> role #coll.role<output_rows, output_pooled> send_splits(%[[BS]] : tensor<2xi64>) recv_splits(%[[BR]] : tensor<2xi64>) {group = "g"}
// CHECK-NEXT:  %[[R:[a-z0-9]+]], %[[P:[a-z0-9]+]] = sparse.split_segments %[[GOT]] recv(%back, %[[RECV]])
// CHECK-NEXT:  sparse.unpack %[[P]] layout
// CHECK:       coll.all_to_all %rows {{.*}} role #coll.role<output_rows> send_splits(%sizes : tensor<2xi64>) {group = "g", remark = #sched.remark<"aggregate-comm", "layout", "not merged: a dynamic exchange without recv_splits exchanges its sizes first (layout mapping not computable)">}
// CHECK:       sched.yield %[[R]], %{{[a-z0-9]+}}, %back
// CAP-LABEL:   sched.step @dynamic_pairs
// CAP:         role #coll.role<output_pooled> {{.*}}remark = #sched.remark<"aggregate-comm", "max-bytes", "not merged: the merged buffer would hold {{[0-9]+}} bytes, over max-bytes 100">
// CAP-NOT:     sparse.join_segments
sched.step @dynamic_pairs world_size = 2 outputs = 3 attributes {batch = "4"} {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %pooled: tensor<?x4xf32>):
  %l, %ix, %sp = sparse.route ids(%i0 : tensor<?xi64>) offsets(%o0 : tensor<?xi64>) features = [#sparse.feature<"h" -> "item", pooling_factor = 1.0>] placements = [#sparse.placement<"item", table_wise, rank = 0>] world_size = 2 {group = "g"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rl = coll.all_to_all %l on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 0], [1, 0]]> {group = "g"} : tensor<?xi32> -> tensor<?xi32>
  %ri, %rs = coll.all_to_all %ix on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%sp : tensor<2xi64>) {group = "g"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %rows, %sizes = sparse.gather_rows %rl, %ri table = #sparse.table<"item", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?xf32>, tensor<2xi64>
  %back = sparse.row_splits %sp dim = 4 {group = "g"} : tensor<2xi64> -> tensor<2xi64>
  %got, %gs = coll.all_to_all %rows on #coll.group<[0, 1]> role #coll.role<output_rows> send_splits(%sizes : tensor<2xi64>) recv_splits(%back : tensor<2xi64>) {group = "g"} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
  %pk = sparse.pack %pooled layout = #sparse.layout<[[0 : 4], [0 : 4]]> : tensor<?x4xf32> -> tensor<?xf32>
  %pb = coll.all_to_all %pk on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[4, 4], [4, 4]]> : tensor<?xf32> -> tensor<?xf32>
  %pv = sparse.unpack %pb layout = #sparse.layout<[[0 : 4], [0 : 4]]> : tensor<?xf32> -> tensor<?x4xf32>
  %ob, %os = coll.all_to_all %rows on #coll.group<[0, 1]> role #coll.role<output_rows> send_splits(%sizes : tensor<2xi64>) {group = "g"} : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
  sched.yield %got, %pv, %gs : tensor<?xf32>, tensor<?x4xf32>, tensor<2xi64>
} backward {
^bb0(%g0: tensor<?xf32>, %g1: tensor<?x4xf32>, %g2: tensor<2xi64>):
  sched.yield
}
