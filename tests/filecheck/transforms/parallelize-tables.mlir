// RUN: sparselift-opt %s --split-input-file -p parallelize-tables | filecheck %s
// RUN: sparselift-opt %s --split-input-file -p 'parallelize-tables{groups=3}' | filecheck %s --check-prefix=G3
// RUN: sparselift-opt %s --split-input-file -p 'parallelize-tables{groups=3 max-workspace-bytes=600}' | filecheck %s --check-prefix=CAP600
// RUN: sparselift-opt %s --split-input-file -p 'parallelize-tables{max-workspace-bytes=500}' | filecheck %s --check-prefix=CAP500
// RUN: sparselift-opt %s --split-input-file -p 'parallelize-tables{backend=none}' | filecheck %s --check-prefix=NONE
// RUN: sparselift-opt %s --split-input-file -p 'parallelize-tables{groups=1}' | filecheck %s --check-prefix=G1
// RUN: sparselift-opt %s --split-input-file -p 'parallelize-tables{backend=cuda}' | filecheck %s --check-prefix=CHECK
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p 'lift-sparse,parallelize-tables{groups=2}' | filecheck %s --check-prefix=KAGGLE
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p 'lift-sparse,aggregate-comm,parallelize-tables{groups=2},generate-kernels' | filecheck %s --check-prefix=FUSED
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p 'lift-sparse,generate-kernels,parallelize-tables{groups=2}' | filecheck %s --check-prefix=KFIRST
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p 'lift-sparse,parallelize-tables{groups=2}' -t plan-module | filecheck %s --check-prefix=PLAN
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p 'lift-sparse,aggregate-comm{roles=dense_grad},parallelize-tables{groups=2}' | filecheck %s --check-prefix=RIDE

// Replicated tables' updates whose gradients ride in the dense gradients' all-reduce run after
// backward: they stay out of the lanes, each with the remark.
// RIDE:         coll.all_reduce {{.*}} with_dense_grads
// RIDE-NEXT:    sparse.lookup_update grad {{.*}}#sched.remark<"parallelize-tables", "with-dense-grads", "not in a lane: it runs after the dense gradients' all-reduce">

// Four tables (three on rank 0, one on rank 1), batch 4 on 2 ranks. SRSV workload on rank 0
// (bytes gathered = 8 bags per sample x pooling factor x dim 8 x 4 B): t0 1024, t2 512, t1 256.
// LPT per rank: t0 -> lane 0, t2 and t1 -> lane 1 (768 < 1024 + 512), t3 (rank 1) -> lane 0.
// Lanes keep program order; the step's users read the parallel's results.
// CHECK-LABEL: sched.step @four_tables
// CHECK:       sparse.route
// CHECK-NEXT:  %p0, %p3, %p1, %p2 = sched.parallel lanes 2 -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) {
// CHECK-NEXT:    %p0_1 = sparse.lookup %l, %ix table = #sparse.table<"t0"
// CHECK-NEXT:    %p3_1 = sparse.lookup %l, %ix table = #sparse.table<"t3"
// CHECK-NEXT:    sched.yield %p0_1, %p3_1 : tensor<?x8xf32>, tensor<?x8xf32>
// CHECK-NEXT:  }, {
// CHECK-NEXT:    %p1_1 = sparse.lookup %l, %ix table = #sparse.table<"t1"
// CHECK-NEXT:    %p2_1 = sparse.lookup %l, %ix table = #sparse.table<"t2"
// CHECK-NEXT:    sched.yield %p1_1, %p2_1 : tensor<?x8xf32>, tensor<?x8xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  sched.yield %p0, %p1, %p2, %p3, %l, %ix
// CHECK:       } backward {
// CHECK:       sched.parallel lanes 2 {
// CHECK-NEXT:    sparse.lookup_update %sl, %si grad %g0 table = #sparse.table<"t0"
// CHECK-NEXT:    sparse.lookup_update %sl, %si grad %g3 table = #sparse.table<"t3"
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  }, {
// CHECK-NEXT:    sparse.lookup_update %sl, %si grad %g1 table = #sparse.table<"t1"
// CHECK-NEXT:    sparse.lookup_update %sl, %si grad %g2 table = #sparse.table<"t2"
// CHECK-NEXT:    sched.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  sched.yield
// CHECK-NOT:   remark

// groups=3: rank 0 runs three lookups, so three lanes, one table each there.
// G3-LABEL:    sched.step @four_tables
// G3:          %p0, %p3, %p2, %p1 = sched.parallel lanes 3
// G3-NEXT:       sparse.lookup {{.*}}"t0"
// G3-NEXT:       sparse.lookup {{.*}}"t3"
// G3-NEXT:       sched.yield
// G3-NEXT:     }, {
// G3-NEXT:       sparse.lookup {{.*}}"t2"
// G3-NEXT:       sched.yield
// G3-NEXT:     }, {
// G3-NEXT:       sparse.lookup {{.*}}"t1"
// G3-NEXT:       sched.yield

// Workspace: each lookup's output is 8 bags x 8 x 4 B = 256 B; three lanes on rank 0 hold 768 B
// at once, over a cap of 600: two lanes (512 B) are used instead, and the remark says why.
// CAP600-LABEL: sched.step @four_tables
// CAP600:       sched.parallel lanes 2 -> ({{.*}}) attributes {remark = #sched.remark<"parallelize-tables", "workspace", "2 lanes instead of 3: 3 would hold 768 bytes of outputs at once on rank 0, over max-workspace-bytes 600">}
// Updates produce no outputs: three lanes fit.
// CAP600:       } backward {
// CAP600:       sched.parallel lanes 3 {

// Under 512 B not even two lanes fit: the lookups stay as they are, with a remark.
// CAP500-LABEL: sched.step @four_tables
// CAP500-NOT:   sched.parallel
// CAP500:       sparse.lookup {{.*}}"t0"{{.*}} {remark = #sched.remark<"parallelize-tables", "workspace", "not parallelized: 2 concurrent lanes would hold 512 bytes of outputs at once on rank 0, over max-workspace-bytes 500">}
// CAP500:       } backward {
// CAP500:       sched.parallel lanes 2

// A backend without concurrent lanes, and fewer than two lanes: nothing changes; the step says why.
// NONE-LABEL:  sched.step @four_tables world_size = 2 outputs = 4 attributes {batch = "4", remark = #sched.remark<"parallelize-tables", "backend", "not parallelized: backend 'none' cannot run lanes concurrently; supported: cpu, cuda">}
// NONE-NOT:    sched.parallel
// G1-LABEL:    sched.step @four_tables world_size = 2 outputs = 4 attributes {batch = "4", remark = #sched.remark<"parallelize-tables", "lanes", "nothing to do: groups=1, at least 2 lanes are needed">}
// G1-NOT:      sched.parallel
sched.step @four_tables world_size = 2 outputs = 4 attributes {batch = "4"} {
^bb0(%i0: tensor<?xi64>, %o0: tensor<?xi64>, %i1: tensor<?xi64>, %o1: tensor<?xi64>, %i2: tensor<?xi64>, %o2: tensor<?xi64>, %i3: tensor<?xi64>, %o3: tensor<?xi64>):
  %l, %ix, %sp = sparse.route ids(%i0, %i1, %i2, %i3 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) offsets(%o0, %o1, %o2, %o3 : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 4.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 1.0>, #sparse.feature<"f2" -> "t2", pooling_factor = 2.0>, #sparse.feature<"f3" -> "t3", pooling_factor = 1.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 0>, #sparse.placement<"t2", table_wise, rank = 0>, #sparse.placement<"t3", table_wise, rank = 1>] world_size = 2 -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %p0 = sparse.lookup %l, %ix table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %p1 = sparse.lookup %l, %ix table = #sparse.table<"t1", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 0> slots = [1] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %p2 = sparse.lookup %l, %ix table = #sparse.table<"t2", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t2", table_wise, rank = 0> slots = [2] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %p3 = sparse.lookup %l, %ix table = #sparse.table<"t3", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t3", table_wise, rank = 1> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  sched.yield %p0, %p1, %p2, %p3, %l, %ix : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb0(%g0: tensor<?x8xf32>, %g1: tensor<?x8xf32>, %g2: tensor<?x8xf32>, %g3: tensor<?x8xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  sparse.lookup_update %sl, %si grad %g0 table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
  sparse.lookup_update %sl, %si grad %g1 table = #sparse.table<"t1", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 0> slots = [1] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
  sparse.lookup_update %sl, %si grad %g2 table = #sparse.table<"t2", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t2", table_wise, rank = 0> slots = [2] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
  sparse.lookup_update %sl, %si grad %g3 table = #sparse.table<"t3", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t3", table_wise, rank = 1> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
  sched.yield
}

// -----

// A pack of a lookup's result depends on it: nothing runs concurrently, the pack says why.
// CHECK-LABEL: sched.step @dependent
// CHECK-NOT:   sched.parallel
// CHECK:       sparse.pack %p0 {{.*}} {remark = #sched.remark<"parallelize-tables", "independence", "not parallelized with the ops before it: it depends on sparse.lookup of table 't0'">}
sched.step @dependent world_size = 1 outputs = 1 attributes {batch = "4"} {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %p0 = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %b = sparse.pack %p0 layout = #sparse.layout<[[0 : 8]]> : tensor<?x8xf32> -> tensor<?xf32>
  sched.yield %b : tensor<?xf32>
} backward {
^bb0(%g: tensor<?xf32>):
  sched.yield
}

// -----

// Two ops of one table conflict although no value links them (the update writes what the
// gradient reads): they are not run concurrently.
// CHECK-LABEL: sched.step @same_table
// CHECK:       } backward {
// CHECK-NOT:   sched.parallel
// CHECK:       sparse.lookup_update {{.*}} {remark = #sched.remark<"parallelize-tables", "independence", "not parallelized with the ops before it: sparse.lookup_grad of table 't0' also touches table 't0'">}
sched.step @same_table world_size = 1 outputs = 1 attributes {batch = "4"} {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %p0 = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  sched.yield %p0, %l, %i : tensor<?x8xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb0(%g: tensor<?x8xf32>, %sl: tensor<?xi32>, %si: tensor<?xi64>):
  %tg = sparse.lookup_grad %sl, %si grad %g table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32> -> tensor<10x8xf32>
  sparse.lookup_update %sl, %si grad %g table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", data_parallel> slots = [0] optimizer = #sparse.optimizer<sgd> : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
  sched.yield
}

// -----

// Independent, but each rank runs only one of them: lanes would gain nothing.
// CHECK-LABEL: sched.step @one_per_rank
// CHECK-NOT:   sched.parallel
// CHECK:       sparse.lookup {{.*}}"t0"{{.*}} {remark = #sched.remark<"parallelize-tables", "independence", "not parallelized: 2 independent ops, but no rank runs more than one of them">}
sched.step @one_per_rank world_size = 2 outputs = 2 attributes {batch = "4"} {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>):
  %p0 = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %p1 = sparse.lookup %l, %i table = #sparse.table<"t1", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 1> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  sched.yield %p0, %p1 : tensor<?x8xf32>, tensor<?x8xf32>
} backward {
^bb0(%g0: tensor<?x8xf32>, %g1: tensor<?x8xf32>):
  sched.yield
}

// -----

// A dense region ends a group: nothing moves across it.
// CHECK-LABEL: sched.step @dense_between
// CHECK-NOT:   sched.parallel
// CHECK:       sched.dense @mlp
sched.step @dense_between world_size = 1 outputs = 3 attributes {batch = "4"} {
^bb0(%l: tensor<?xi32>, %i: tensor<?xi64>, %x: tensor<?x8xf32>):
  %p0 = sparse.lookup %l, %i table = #sparse.table<"t0", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %y = sched.dense @mlp(%x) phase "forward" : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %p1 = sparse.lookup %l, %i table = #sparse.table<"t1", rows = 10, dim = 8, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 0> slots = [1] : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  sched.yield %p0, %y, %p1 : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
} backward {
^bb0(%g0: tensor<?x8xf32>, %g1: tensor<?x8xf32>, %g2: tensor<?x8xf32>):
  sched.yield
}

// Kaggle on 2 ranks. Forward: the table-wise lookups (7 on rank 0, 8 on rank 1) in two lanes,
// then the two per-rank packs (one per rank: refused), the replicated tables' lookups in two lanes
// (read by the dense region directly: no pack). Backward: the replicated tables' gradients, their dense updates
// (with the independent table-wise gradient pack), the table-wise updates.
// KAGGLE:         sched.parallel lanes 2 -> (tensor<?x16xf32>
// KAGGLE-COUNT-4: sparse.lookup {{.*}}placement = #sparse.placement<"emb_l.{{[0-9]+}}", table_wise, rank = 0>
// KAGGLE:         }, {
// KAGGLE-COUNT-3: sparse.lookup {{.*}}placement = #sparse.placement<"emb_l.{{[0-9]+}}", table_wise, rank = 0>
// KAGGLE:         sparse.pack {{.*}} on_rank 0 {{.*}}remark = #sched.remark<"parallelize-tables", "independence", "not parallelized: 2 independent ops, but no rank runs more than one of them">
// KAGGLE:         sched.parallel lanes 2
// KAGGLE-COUNT-6:   sparse.lookup {{.*}}data_parallel
// KAGGLE:         }, {
// KAGGLE-COUNT-5:   sparse.lookup {{.*}}data_parallel
// KAGGLE-NOT:     sparse.pack
// KAGGLE:         sched.dense @dense_post
// KAGGLE:         } backward {
// KAGGLE:         sched.parallel lanes 2
// KAGGLE-COUNT-6:   sparse.lookup_grad
// KAGGLE:         coll.all_reduce
// KAGGLE-NEXT:    sched.parallel lanes 2 -> (tensor<?xf32>)
// KAGGLE:         sparse.pack
// KAGGLE-NEXT:    sched.yield %{{.*}} : tensor<?xf32>
// KAGGLE:         coll.all_to_all
// KAGGLE:         sched.parallel lanes 2 {
// KAGGLE-COUNT-8:   sparse.lookup_update %

// The order of the final pipeline: generate-kernels then fuses within each lane, one kernel per
// lane and rank, so the lanes stay concurrent.
// FUSED:       sched.parallel lanes 2
// FUSED-NEXT:    sparse.fused_lookup {{.*}}table_wise, rank = 1>] slots
// FUSED-NEXT:    sparse.fused_lookup {{.*}}table_wise, rank = 0>] slots
// FUSED-NEXT:    sched.yield
// FUSED-NEXT:  }, {
// FUSED-NEXT:    sparse.fused_lookup {{.*}}table_wise, rank = 0>] slots
// FUSED-NEXT:    sparse.fused_lookup {{.*}}table_wise, rank = 1>] slots
// FUSED-NEXT:    sched.yield
// FUSED:       sched.parallel lanes 2
// FUSED-NEXT:    sparse.fused_lookup {{.*}} {group = "emb_l/data_parallel"}
// FUSED-NEXT:    sched.yield
// FUSED-NEXT:  }, {
// FUSED-NEXT:    sparse.fused_lookup {{.*}} {group = "emb_l/data_parallel"}
// FUSED:       } backward {
// FUSED:       sched.parallel lanes 2 {
// FUSED-NEXT:    sparse.fused_lookup_update {{.*}} {group = "emb_l/table_wise"}
// FUSED-NEXT:    sparse.fused_lookup_update {{.*}} {group = "emb_l/table_wise"}
// FUSED-NEXT:    sched.yield
// FUSED-NEXT:  }, {
// FUSED-NEXT:    sparse.fused_lookup_update {{.*}} {group = "emb_l/table_wise"}
// FUSED-NEXT:    sparse.fused_lookup_update {{.*}} {group = "emb_l/table_wise"}
// FUSED-NEXT:    sched.yield

// The other order: fused kernels are one per rank already (the replicated tables' gradients
// too), so only the replicated tables' updates (not fused) get lanes.
// KFIRST:      sparse.fused_lookup {{.*}} {group = "emb_l/table_wise", remark = #sched.remark<"parallelize-tables", "independence", "not parallelized: 2 independent ops, but no rank runs more than one of them">}
// KFIRST:      sparse.fused_lookup {{.*}} {group = "emb_l/data_parallel"}
// KFIRST:      } backward {
// KFIRST:      sparse.fused_lookup_grad {{.*}} {group = "emb_l/data_parallel"}
// KFIRST:      sched.parallel lanes 2
// KFIRST-NEXT:   sparse.lookup_update grad
// KFIRST:      sparse.fused_lookup_update {{.*}} {group = "emb_l/table_wise", remark = #sched.remark<"parallelize-tables", "independence", "not parallelized: 2 independent ops, but no rank runs more than one of them">}

// The plan module: each lane is a closure returning what it yields; rt.parallel runs them.
// PLAN:        def _segment_0_forward(
// PLAN:          def _lane_0():
// PLAN-NEXT:         if self.rank in (1,):
// PLAN-NEXT:             [[V:v[0-9]+]] = rt.lookup(self, 'emb_l.0',
// PLAN-NEXT:         else:
// PLAN-NEXT:             [[V]] = None
// PLAN:              return ([[V]], v
// PLAN-NEXT:     def _lane_1():
// PLAN:          {{v[0-9]+(, v[0-9]+)*}} = rt.parallel(self, [_lane_0, _lane_1])
// PLAN:        def _segment_0_backward(
// PLAN:          rt.parallel(self, [_lane_0, _lane_1])
