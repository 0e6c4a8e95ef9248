// RUN: sparselift-opt %s --split-input-file -p generate-kernels | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'generate-kernels{min-tables=3}' | filecheck %s --check-prefix=MIN3
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p lift-sparse,generate-kernels | filecheck %s --check-prefix=KAGGLE
// RUN: sparselift-opt %s --split-input-file -p 'generate-kernels{per-slot-grads=false}' | filecheck %s --check-prefix=PACKED
// RUN: sparselift-opt %S/../inputs/din-ws2.mlir -p 'lift-sparse{rows=jagged},generate-kernels' | filecheck %s --check-prefix=DIN

// Two tables on rank 1 reading the same received buffers: one fused lookup and one fused update.
// The table on rank 0 stays a per-table op (a fused call of one table gains nothing); the step
// says that its table ops run generated kernels, fused or not.
// CHECK-LABEL: sched.step @two_on_one_rank
// CHECK-SAME:  attributes {kernels = "generated"}
// CHECK:       sparse.lookup %l, %i table = #sparse.table<"t0"
// CHECK-NEXT:  %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}} = sparse.fused_lookup %l, %i tables = [#sparse.table<"t1", {{.*}}>, #sparse.table<"t2", {{.*}}>] placements = [#sparse.placement<"t1", table_wise, rank = 1>, #sparse.placement<"t2", table_wise, rank = 1>] slots = [array<i64: 0>, array<i64: 1>] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>, tensor<?x4xf32>
// CHECK-NOT:   sparse.lookup {{.*}}"t1"
// CHECK:       } backward {
// CHECK:       sparse.lookup_update %sl, %si grad %g0 table = #sparse.table<"t0"
// CHECK:       sparse.fused_lookup_update %sl, %si grads(%g1, %g2 : tensor<?x8xf32>, tensor<?x4xf32>) {{.*}} optimizer = #sparse.optimizer<sgd> {group = "g"}
// MIN3-LABEL:  sched.step @two_on_one_rank
// MIN3-NOT:    sparse.fused_
sched.step @two_on_one_rank world_size = 2 outputs = 3 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %p0 = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %p1 = sparse.lookup %l, %i table = #sparse.table<"t1", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 1> slots = [0] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %p2 = sparse.lookup %l, %i table = #sparse.table<"t2", rows = 10, dim = 4, f32, mean> placement = #sparse.placement<"t2", table_wise, rank = 1> slots = [1] {group = "g"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x4xf32>
  sched.yield %p0, %p1, %p2, %l, %i : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x4xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb0(%g0: tensor<?x8xf32>, %g1: tensor<?x8xf32>, %g2: tensor<?x4xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  sparse.lookup_update %sl, %si grad %g0 table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<sgd> {group = "g"} : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
  sparse.lookup_update %sl, %si grad %g1 table = #sparse.table<"t1", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 1> slots = [0] optimizer = #sparse.optimizer<sgd> {group = "g"} : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
  sparse.lookup_update %sl, %si grad %g2 table = #sparse.table<"t2", rows = 10, dim = 4, f32, mean> placement = #sparse.placement<"t2", table_wise, rank = 1> slots = [1] optimizer = #sparse.optimizer<sgd> {group = "g"} : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32>
  sched.yield
}

// -----

// Weighted and unweighted lookups read different operands: not fused together.
// CHECK-LABEL: sched.step @weights_differ
// CHECK-NOT:   sparse.fused_
sched.step @weights_differ world_size = 1 outputs = 2 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %w: tensor<?xf32>):
  %p0 = sparse.lookup %l, %i weights %w : tensor<?xf32> table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %p1 = sparse.lookup %l, %i table = #sparse.table<"t1", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 0> slots = [1] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  sched.yield %p0, %p1 : tensor<?x8xf32>, tensor<?x8xf32>
} backward {
^bb0(%g0: tensor<?x8xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// Replicated tables: their whole-table gradients fuse into one kernel that returns them all, in
// the place of the last one, and the all-reduce reads the kernel's results.
// CHECK-LABEL: sched.step @replicated_gradients
// CHECK:       } backward {
// CHECK-NEXT:  ^{{.*}}
// CHECK-NEXT:  %[[G0:[0-9a-z_]+]], %[[G1:[0-9a-z_]+]] = sparse.fused_lookup_grad %sl, %si grads(%g0, %g1 : tensor<?x8xf32>, tensor<?x4xf32>) {{.*}} {group = "dp"} : tensor<?xi32>, tensor<?xi64> -> tensor<10x8xf32>, tensor<6x4xf32>
// CHECK-NEXT:  coll.all_reduce %[[G0]], %[[G1]]
// CHECK-NOT:   sparse.lookup_grad
// MIN3-LABEL:  sched.step @replicated_gradients
// MIN3-NOT:    sparse.fused_
sched.step @replicated_gradients world_size = 2 outputs = 2 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %x0: tensor<?x8xf32>, %x1: tensor<?x4xf32>):
  sched.yield %x0, %x1, %l, %i : tensor<?x8xf32>, tensor<?x4xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb0(%g0: tensor<?x8xf32>, %g1: tensor<?x4xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  %t0 = sparse.lookup_grad %sl, %si grad %g0 table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] {group = "dp"} : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32> -> tensor<10x8xf32>
  %t1 = sparse.lookup_grad %sl, %si grad %g1 table = #sparse.table<"t1", rows = 6, dim = 4, f32, sum> placement = #sparse.placement<"t1", data_parallel> slots = [1] {group = "dp"} : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32> -> tensor<6x4xf32>
  %r0, %r1 = coll.all_reduce %t0, %t1 on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<10x8xf32>, tensor<6x4xf32> -> tensor<10x8xf32>, tensor<6x4xf32>
  sparse.lookup_update grad %r0 table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<10x8xf32>
  sparse.lookup_update grad %r1 table = #sparse.table<"t1", rows = 6, dim = 4, f32, sum> placement = #sparse.placement<"t1", data_parallel> slots = [1] optimizer = #sparse.optimizer<sgd> : tensor<6x4xf32>
  sched.yield
}

// -----

// A replicated table read at several positions (t0, three slots): lift-sparse packs its
// positions' gradients side by side and unpacks them whole. The fused table gradient takes the
// positions' gradients themselves (the per-slot form, table after table: t0's three, then t1's
// one) and the pack and unpack go. With `per-slot-grads=false` the pack stays.
// CHECK-LABEL: sched.step @replicated_positions
// CHECK:       } backward {
// CHECK-NEXT:  ^{{.*}}
// CHECK-NEXT:  %[[G0:[0-9a-z_]+]], %[[G1:[0-9a-z_]+]] = sparse.fused_lookup_grad %sl, %si grads(%a, %b, %c, %g1 : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x8xf32>) {{.*}} slots = [array<i64: 0, 1, 2>, array<i64: 3>] : tensor<?xi32>, tensor<?xi64> -> tensor<10x4xf32>, tensor<6x8xf32>
// CHECK-NOT:   remark
// CHECK-NEXT:  coll.all_reduce %[[G0]], %[[G1]]
// CHECK-NOT:   sparse.pack
// CHECK-NOT:   sparse.unpack
// PACKED-LABEL: sched.step @replicated_positions
// PACKED:       %[[PK:[0-9a-z_]+]] = sparse.pack %a, %b, %c
// PACKED-NEXT:  %[[U:[0-9a-z_]+]] = sparse.unpack %[[PK]]
// PACKED-NEXT:  sparse.fused_lookup_grad %sl, %si grads(%[[U]], %g1 : tensor<?x12xf32>, tensor<?x8xf32>)
// PACKED-NOT:   remark
// A table with several slots is fused even alone, so min-tables=3 fuses this group too.
// MIN3-LABEL:   sched.step @replicated_positions
// MIN3:         sparse.fused_lookup_grad %sl, %si grads(%a, %b, %c, %g1 :
sched.step @replicated_positions world_size = 2 outputs = 4 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %x0: tensor<?x4xf32>, %x1: tensor<?x4xf32>, %x2: tensor<?x4xf32>, %x3: tensor<?x8xf32>):
  sched.yield %x0, %x1, %x2, %x3, %l, %i : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x8xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb0(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>, %c: tensor<?x4xf32>, %g1: tensor<?x8xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  %pk = sparse.pack %a, %b, %c layout = #sparse.layout<[[0 : 4, 4 : 4, 8 : 4]]> : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?xf32>
  %u = sparse.unpack %pk layout = #sparse.layout<[[0 : 12]]> : tensor<?xf32> -> tensor<?x12xf32>
  %t0 = sparse.lookup_grad %sl, %si grad %u table = #sparse.table<"t0", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"t0", data_parallel> slots = [0, 1, 2] : tensor<?xi32>, tensor<?xi64>, tensor<?x12xf32> -> tensor<10x4xf32>
  %t1 = sparse.lookup_grad %sl, %si grad %g1 table = #sparse.table<"t1", rows = 6, dim = 8, f32, sum> placement = #sparse.placement<"t1", data_parallel> slots = [3] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32> -> tensor<6x8xf32>
  %r0, %r1 = coll.all_reduce %t0, %t1 on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<10x4xf32>, tensor<6x8xf32> -> tensor<10x4xf32>, tensor<6x8xf32>
  sched.yield
}

// -----

// Negative: the pack lays the positions' gradients out of slot order (slot 0 is the second
// block), so they cannot be read one per slot as they are: the fused op keeps the packed
// gradient and says why.
// CHECK-LABEL: sched.step @positions_out_of_order
// CHECK:       sparse.pack %a, %b
// CHECK:       sparse.fused_lookup_grad %sl, %si grads(%{{[0-9a-z_]+}} : tensor<?x8xf32>) {{.*}}remark = #sched.remark<"generate-kernels", "per-slot", "slots' gradients packed: table 't0': the pack does not lay the slots' gradients side by side in slot order">
sched.step @positions_out_of_order world_size = 2 outputs = 2 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %x0: tensor<?x4xf32>, %x1: tensor<?x4xf32>):
  sched.yield %x0, %x1, %l, %i : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb0(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  %pk = sparse.pack %a, %b layout = #sparse.layout<[[4 : 4, 0 : 4]]> : tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?xf32>
  %u = sparse.unpack %pk layout = #sparse.layout<[[0 : 8]]> : tensor<?xf32> -> tensor<?x8xf32>
  %t0 = sparse.lookup_grad %sl, %si grad %u table = #sparse.table<"t0", rows = 10, dim = 4, f32, none> placement = #sparse.placement<"t0", data_parallel> slots = [0, 1] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32> -> tensor<10x4xf32>
  %r0 = coll.all_reduce %t0 on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<10x4xf32> -> tensor<10x4xf32>
  sched.yield
}

// -----

// The first table gradient is all-reduced before the second one is computed: fusing them would
// move the first past its reader, so both stay per-table ops.
// CHECK-LABEL: sched.step @gradient_read_early
// CHECK-NOT:   sparse.fused_
// CHECK:       sparse.lookup_grad
// CHECK:       coll.all_reduce
// CHECK:       sparse.lookup_grad
sched.step @gradient_read_early world_size = 2 outputs = 2 {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %x0: tensor<?x8xf32>, %x1: tensor<?x4xf32>):
  sched.yield %x0, %x1, %l, %i : tensor<?x8xf32>, tensor<?x4xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb0(%g0: tensor<?x8xf32>, %g1: tensor<?x4xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  %t0 = sparse.lookup_grad %sl, %si grad %g0 table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32> -> tensor<10x8xf32>
  %r0 = coll.all_reduce %t0 on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<10x8xf32> -> tensor<10x8xf32>
  %t1 = sparse.lookup_grad %sl, %si grad %g1 table = #sparse.table<"t1", rows = 6, dim = 4, f32, sum> placement = #sparse.placement<"t1", data_parallel> slots = [1] : tensor<?xi32>, tensor<?xi64>, tensor<?x4xf32> -> tensor<6x4xf32>
  %r1 = coll.all_reduce %t1 on #coll.group<[0, 1]> role #coll.role<sparse_grad> reduce "sum" : tensor<6x4xf32> -> tensor<6x4xf32>
  sparse.lookup_update grad %r0 table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<10x8xf32>
  sparse.lookup_update grad %r1 table = #sparse.table<"t1", rows = 6, dim = 4, f32, sum> placement = #sparse.placement<"t1", data_parallel> slots = [1] optimizer = #sparse.optimizer<sgd> : tensor<6x4xf32>
  sched.yield
}

// Kaggle, 2 ranks: the table-wise lookups of each owner rank fuse into one kernel per rank.
// KAGGLE-COUNT-2: sparse.fused_lookup {{.*}} {group = "emb_l/table_wise"}
// KAGGLE-NOT:     sparse.lookup {{.*}}table_wise
// Then, in backward, the replicated tables' gradients fuse into one kernel.
// KAGGLE: sparse.fused_lookup_grad {{.*}} {group = "emb_l/data_parallel"}
// KAGGLE-NOT: sparse.lookup_grad

// DIN (`din-ws2.mlir`): the replicated category table's 51 positions (50 history items and the
// target) give their gradients to its table gradient one by one: the backward packs only the
// pooled user table's gradient for its exchange.
// DIN:       } backward {
// DIN-NOT:   sparse.pack {{.*}}"cat/data_parallel"
// DIN:       sparse.fused_lookup_grad %{{[0-9]+}}, %{{[0-9]+}} grads(%{{[0-9]+(, %[0-9]+)+}} : tensor<?x16xf32>, tensor<?x16xf32>, {{.*}}) tables = [#sparse.table<"cat", {{.*}}>]
// DIN-NOT:   remark
// DIN-NOT:   sparse.unpack {{.*}}"cat/data_parallel"
