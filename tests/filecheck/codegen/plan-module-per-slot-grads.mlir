// RUN: sparselift-opt %S/../inputs/din-ws2.mlir -p 'lift-sparse{rows=jagged replicated-grads=with-dense},generate-kernels' -t plan-module | filecheck %s
// RUN: sparselift-opt %S/../inputs/din-ws2.mlir -p 'lift-sparse{rows=jagged replicated-grads=with-dense},generate-kernels{per-slot-grads=false}' -t plan-module | filecheck %s --check-prefix=PACKED

// DIN's replicated category table, read at 51 positions: its table gradient takes the positions'
// gradients as the dense backward hands them over, one list per table (`grads=[[...]]`), with no
// pack of them before the call. The all-reduce and the update that follow are unchanged.
// CHECK:       def _segment_1_backward(self, grads, saved):
// CHECK-NOT:     rt.pack
// CHECK:         [[T:v[0-9]+]], = rt.fused_lookup_grad(self, ('cat',), {{.*}}, grads={{\[\[(v[0-9]+, )+v[0-9]+\]\]}})
// CHECK-NEXT:    def [[THEN:_after_v[0-9]+]]([[S:v[0-9]+]]):
// CHECK-NEXT:        rt.dense_update(self, 'cat', [[S]], optimizer='sgd'
// CHECK-NEXT:    rt.all_reduce_with_dense_grads(self, {{\[}}[[T]]{{\]}}, then=[[THEN]])

// With `per-slot-grads=false`: the positions are packed first, and the call reads the packed
// buffer's one member.
// PACKED:       def _segment_1_backward(self, grads, saved):
// PACKED:         [[B:v[0-9]+]] = rt.pack(self, [
// PACKED-NEXT:    {{v[0-9]+}}, = rt.unpack(self, [[B]],
// PACKED-NEXT:    {{v[0-9]+}}, = rt.fused_lookup_grad(self, ('cat',), {{.*}}, grads={{\[v[0-9]+\]}})
