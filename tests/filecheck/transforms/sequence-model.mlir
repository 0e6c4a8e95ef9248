// The passes on a model with unpooled lookups (../inputs/sequence-ws2.mlir: the parity tests'
// SequenceModel, table-wise on 2 ranks). `item` (rank 0: a padded history of 4 positions and the
// target) and `cat` (rank 1: 4 positions) are unpooled tables, one feature per id position;
// `user` (sum) and `tags` (mean) are pooled, on rank 1. Unpooled groups exchange rows
// (`output_rows`, `grad_rows`), pooled ones pooled vectors.
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p lift-sparse | filecheck %s --check-prefix=LIFT
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p lift-sparse,aggregate-comm | filecheck %s --check-prefix=AGG
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p 'lift-sparse,aggregate-comm{roles=output_rows,grad_rows}' | filecheck %s --check-prefix=ROWS
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p 'lift-sparse,aggregate-comm{max-bytes=500}' | filecheck %s --check-prefix=CAP
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p lift-sparse,aggregate-comm,generate-kernels,hide-latency | filecheck %s --check-prefix=ALL
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p 'lift-sparse,parallelize-tables{groups=2}' | filecheck %s --check-prefix=PAR
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p lift-sparse,print-srsv | filecheck %s --check-prefix=SRSV
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p lift-sparse,generate-kernels | filecheck %s --check-prefix=GEN
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p 'lift-sparse{rows=jagged},aggregate-comm' | filecheck %s --check-prefix=JAG
// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p 'lift-sparse{rows=jagged},aggregate-comm{roles=output_rows,grad_rows}' | filecheck %s --check-prefix=JROWS

// Rows one per id (the compiler's lowering) are sized at run time: they merge with the other
// exchanges of their direction into one dynamic exchange. The two pooled groups merge first
// (static), then join the two rows exchanges as one member; the split gives every reader what
// its own exchange returned.
// JAG:        %[[RB:[0-9]+]], %{{[0-9]+}}, %{{[0-9]+}} = sparse.join_segments(%{{[0-9]+}}) (%{{[0-9]+}}) send
// JAG:        sparse.static_sizes splits #coll.splits<{{\[\[}}0, 0], [10, 10]]> role #coll.role<output_pooled>
// JAG-NEXT:   %[[BUF:[0-9]+]], %{{[0-9]+}}, %{{[0-9]+}} = sparse.join_segments(%[[RB]]) (%{{[0-9]+}}, %{{[0-9]+}})
// JAG-NEXT:   %[[GOT:[0-9]+]], %{{[0-9]+}} = coll.all_to_all %[[BUF]] on #coll.group<[0, 1]> role #coll.role<output_rows, output_pooled> send_splits
// JAG-NEXT:   %[[R:[0-9]+]], %{{[0-9]+}} = sparse.split_segments %[[GOT]]
// JAG-NEXT:   sparse.split_segments %[[R]]
// JAG-NOT:    coll.all_to_all {{.*}} role #coll.role<output
// JAG:        } backward {
// JAG:        sparse.static_sizes splits #coll.splits<{{\[\[}}0, 10], [0, 10]]> role #coll.role<grad_pooled>
// JAG:        coll.all_to_all {{.*}} role #coll.role<grad_pooled, grad_rows> send_splits
// JAG-NOT:    coll.all_to_all

// Option: only the rows' roles. The two rows exchanges merge (both dynamic); the pooled ones
// stay static, apart.
// JROWS:      sparse.join_segments
// JROWS-NOT:  sparse.static_sizes
// JROWS:      coll.all_to_all {{.*}} role #coll.role<output_rows> send_splits
// JROWS:      role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}0, 0], [6, 6]]>
// JROWS:      role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}0, 0], [4, 4]]>
// JROWS:      } backward {
// JROWS:      role #coll.role<grad_pooled> splits
// JROWS:      role #coll.role<grad_pooled> splits
// JROWS:      coll.all_to_all {{.*}} role #coll.role<grad_rows> send_splits
// JROWS-NOT:  sparse.static_sizes

// generate-kernels: one-table groups are fused when the table serves several slots (an
// unpooled table's id positions): its rows go straight into the packed buffer. One-slot tables
// alone stay per-table calls (min-tables = 2).
// GEN:        sparse.fused_lookup {{.*}} tables = [#sparse.table<"item", rows = 60, dim = 8, f32, none>]
// GEN:        sparse.fused_lookup {{.*}} tables = [#sparse.table<"cat", rows = 12, dim = 4, f32, none>]
// GEN:        sparse.lookup {{.*}} table = #sparse.table<"user"
// GEN:        sparse.lookup {{.*}} table = #sparse.table<"tags"
// GEN:        } backward {
// GEN:        sparse.lookup_update {{.*}} table = #sparse.table<"tags"
// GEN:        sparse.lookup_update {{.*}} table = #sparse.table<"user"
// GEN:        sparse.fused_lookup_update {{.*}} tables = [#sparse.table<"cat", {{.*}}>]
// GEN:        sparse.fused_lookup_update {{.*}} tables = [#sparse.table<"item", {{.*}}>]

// In the SRSV, unpooled tables gather one row per id (pf: ids per sample, padding excluded);
// their rows exchanges carry a row of dim x 4 B per id position and sample (8 x 5 x 32 B).
// SRSV:       table  group            placement   owners  rows  dim  dtype  pool  features
// SRSV-NEXT:  item   item/table_wise  table_wise  0         60    8  f32    none  hist[0],hist[1],hist[2],hist[3],target           3.875       62        1984
// SRSV-NEXT:  cat    cat/table_wise   table_wise  1         12    4  f32    none
// SRSV-NEXT:  user   user/table_wise  table_wise  1         40    6  f32    sum
// SRSV:       forward   coll.all_to_all  output_rows    item/table_wise  0,1    f32    static        1280  s0->[1280, 1280] s1->[0, 0]
// SRSV:       backward  coll.all_to_all  grad_rows      item/table_wise  0,1    f32    static        1280  s0->[1280, 0] s1->[1280, 0]

// LIFT-LABEL: sched.step @step world_size = 2 outputs = 1
// LIFT:       sparse.route ids({{.*}}) features = [#sparse.feature<"hist[0]" -> "item", {{.*}}>, #sparse.feature<"hist[1]" -> "item", {{.*}}>, #sparse.feature<"hist[2]" -> "item", {{.*}}>, #sparse.feature<"hist[3]" -> "item", {{.*}}>, #sparse.feature<"target" -> "item", {{.*}}>]
// LIFT:       sparse.lookup {{.*}} table = #sparse.table<"item", rows = 60, dim = 8, f32, none> placement = #sparse.placement<"item", table_wise, rank = 0> slots = [0, 1, 2, 3, 4]
// LIFT-SAME:  -> tensor<?x40xf32>
// LIFT:       coll.all_to_all {{.*}} role #coll.role<output_rows> splits #coll.splits<{{\[\[}}40, 40], [0, 0]]> {group = "item/table_wise"}
// LIFT:       coll.all_to_all {{.*}} role #coll.role<output_rows> splits #coll.splits<{{\[\[}}0, 0], [16, 16]]> {group = "cat/table_wise"}
// LIFT:       coll.all_to_all {{.*}} role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}0, 0], [6, 6]]> {group = "user/table_wise"}
// LIFT:       coll.all_to_all {{.*}} role #coll.role<output_pooled> splits #coll.splits<{{\[\[}}0, 0], [4, 4]]> {group = "tags/table_wise"}
// LIFT:       } backward {
// LIFT:       coll.all_to_all {{.*}} role #coll.role<grad_rows> {{.*}} {group = "cat/table_wise"}
// LIFT:       sparse.lookup_update {{.*}} table = #sparse.table<"cat", rows = 12, dim = 4, f32, none>
// LIFT:       coll.all_to_all {{.*}} role #coll.role<grad_rows> {{.*}} {group = "item/table_wise"}
// LIFT:       sparse.lookup_update {{.*}} table = #sparse.table<"item", rows = 60, dim = 8, f32, none>

// Rows and pooled vectors of the same direction travel together: one input, one output, one
// gradient exchange for the four groups.
// AGG:        role #coll.role<input_packed>
// AGG:        coll.all_to_all {{.*}} role #coll.role<output_rows, output_pooled> splits #coll.splits<{{\[\[}}40, 40], [26, 26]]>
// AGG-NOT:    coll.all_to_all {{.*}} role #coll.role<output
// AGG:        } backward {
// AGG:        coll.all_to_all {{.*}} role #coll.role<grad_pooled, grad_rows> splits #coll.splits<{{\[\[}}40, 26], [40, 26]]>
// AGG-NOT:    coll.all_to_all

// Only the rows' roles: the two unpooled groups merge, the pooled ones stay apart.
// ROWS:       coll.all_to_all {{.*}} role #coll.role<output_rows> splits #coll.splits<{{\[\[}}40, 40], [16, 16]]> {group = "item/table_wise+cat/table_wise"}
// ROWS:       coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}} {group = "user/table_wise"}
// ROWS:       coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}} {group = "tags/table_wise"}
// ROWS:       coll.all_to_all {{.*}} role #coll.role<grad_rows> splits #coll.splits<{{\[\[}}40, 16], [40, 16]]> {group = "cat/table_wise+item/table_wise"}

// Under a 500-byte cap the rows exchange (8 samples x 40 floats) stays alone, with the remark.
// CAP:        coll.all_to_all {{.*}} role #coll.role<output_rows> splits #coll.splits<{{\[\[}}40, 40], [0, 0]]>
// CAP:        coll.all_to_all {{.*}} role #coll.role<output_rows> {{.*}} remark = #sched.remark<"aggregate-comm", "max-bytes", "not merged: the merged buffer would hold {{[0-9]+}} bytes, over max-bytes 500">

// All four optimizations: the unpooled `cat` fused with the pooled tables of rank 1, the
// exchanges started early.
// ALL:        coll.all_to_all_start {{.*}} role #coll.role<input_packed>
// ALL:        sparse.fused_lookup {{.*}} tables = [#sparse.table<"cat", rows = 12, dim = 4, f32, none>, #sparse.table<"user", rows = 40, dim = 6, f32, sum>, #sparse.table<"tags", rows = 40, dim = 4, f32, mean>]
// ALL:        coll.all_to_all {{.*}} role #coll.role<output_rows, output_pooled>
// ALL:        } backward {
// ALL:        coll.all_to_all_start {{.*}} role #coll.role<grad_pooled, grad_rows>
// ALL:        sparse.fused_lookup_update {{.*}} tables = [#sparse.table<"tags", {{.*}}>, #sparse.table<"user", {{.*}}>, #sparse.table<"cat", rows = 12, dim = 4, f32, none>]

// Lanes in backward: an unpooled table's update beside the next group's gradient pack.
// PAR:        } backward {
// PAR:        sched.parallel lanes 2
// PAR:        sparse.lookup_update {{.*}} table = #sparse.table<"user", {{.*}}, sum>
// PAR:        }, {
// PAR-NEXT:     sparse.pack {{.*}} {group = "cat/table_wise"}
// PAR:        sched.parallel lanes 2
// PAR-NEXT:     sparse.pack {{.*}} {group = "item/table_wise"}
// PAR:        }, {
// PAR-NEXT:     sparse.lookup_update {{.*}} table = #sparse.table<"cat", rows = 12, dim = 4, f32, none>
