// RUN: sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse,plan-sparse{optimizations=aggregation,codegen}' | filecheck %s
// RUN: echo '{"pipeline": ["aggregate-comm{roles=output_pooled}"]}' > %t.json
// RUN: sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse,plan-sparse{decisions="%t.json"}' | filecheck %s --check-prefix=REPLAY
// RUN: sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse,plan-sparse{memory-cap-bytes=1 optimizations=aggregation,codegen}' | filecheck %s --check-prefix=CAP
// RUN: not sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse,plan-sparse{decisions="%t.missing"}' 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse,plan-sparse{optimizations=sharding}' 2>&1 | filecheck %s --check-prefix=BADFAMILY

// Planning by the analytic model: both towers' pooled outputs and pooled gradients merge
// (aggregation adds one role at a time), the replicated table's gradient rides in the dense
// gradients' all-reduce (dense_grad: one collective less), then the tables of the item tower
// fuse into generated kernels. Roles with nothing to merge are rejected, with the reason.
// The plan is xDSL pass-spec text (string options quoted: `\22` in the attribute).
// CHECK:       builtin.module attributes {plan = "aggregate-comm{roles={{(\\22[a-z_]+\\22,)*}}\22output_pooled\22,\22grad_pooled\22,\22dense_grad\22},generate-kernels", plan_rejected = [{{.*}}"aggregation aggregate sparse_grad: no effect: aggregate-comm{roles=\22sparse_grad\22} left the IR unchanged (nothing to rewrite)"]}
// CHECK:       sparse.fused_lookup 
// CHECK:       coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}} {group = "user/table_wise+item/table_wise"}
// CHECK-NOT:   role #coll.role<output_pooled>
// CHECK:       coll.all_to_all {{.*}} role #coll.role<grad_pooled> {{.*}} {group = "item/table_wise+user/table_wise"}
// CHECK-NOT:   role #coll.role<grad_pooled>
// CHECK:       sparse.fused_lookup_update 

// Replaying recorded decisions applies exactly those specs: no search, nothing rejected.
// REPLAY:      builtin.module attributes {plan = "aggregate-comm{roles=\22output_pooled\22}"} {
// REPLAY-NOT:  sparse.fused_
// REPLAY:      coll.all_to_all {{.*}} role #coll.role<output_pooled> {{.*}} {group = "user/table_wise+item/table_wise"}
// REPLAY-COUNT-2: coll.all_to_all {{.*}} role #coll.role<grad_pooled>

// A 1-byte memory cap: aggregate-comm gets it as max-bytes and refuses every merge; the
// refusals (pass, check, text) are the rejected candidates' reasons. Code generation needs no
// memory and stays, and so does riding with the dense gradients (no new buffer).
// CAP:         builtin.module attributes {plan = "aggregate-comm{roles=\22dense_grad\22 max_bytes=1},generate-kernels", plan_rejected = [{{.*}}"aggregation aggregate output_pooled: aggregate-comm refused (max-bytes): not merged: the merged buffer would hold 6144 bytes, over max-bytes 1", "aggregation aggregate grad_pooled: aggregate-comm refused (max-bytes): not merged: the merged buffer would hold 4096 bytes, over max-bytes 1"
// CAP-COUNT-2: coll.all_to_all {{.*}} role #coll.role<output_pooled>

// MISSING:     plan-sparse: decisions {{.*}}.missing: cannot read it
// BADFAMILY:   plan-sparse: unknown optimization 'sharding'; known: codegen, deduplication, aggregation, parallelism, latency-hiding
