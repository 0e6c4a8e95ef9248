// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p 'lift-sparse,aggregate-comm{roles=dense_grad},generate-kernels' -t plan-module | filecheck %s
// RUN: sparselift-opt %S/../inputs/dlrm-kaggle-ws2.mlir -p 'lift-sparse,generate-kernels' -t plan-module | filecheck %s --check-prefix=OWN

// The replicated tables' gradients ride in the dense gradients' all-reduce at the end of
// backward (`coll.all_reduce ... with_dense_grads`): the segment's backward hands them to the
// runtime with the updates that read their sums, which run once that all-reduce is done.
// CHECK:       collectives per step: 3 forward, 1 backward (1 more in the dense gradients' all-reduce)
// CHECK:       def _segment_1_backward(self, grads, saved):
// CHECK:         [[G:v[0-9]+]], {{.*}} = rt.fused_lookup_grad(self,
// CHECK-NEXT:    def [[THEN:_after_v[0-9]+]]([[S:v[0-9]+]], {{.*}}):
// CHECK-NEXT:        rt.dense_update(self, 'emb_l.1', [[S]], optimizer='sgd'
// CHECK:         rt.all_reduce_with_dense_grads(self, [[[G]], {{.*}}], then=[[THEN]])
// CHECK-NOT:     rt.dense_update
// CHECK:         return None

// Without the dense_grad role: an all-reduce of their own, then the updates.
// OWN:         collectives per step: 3 forward, 2 backward
// OWN:         def _segment_1_backward(self, grads, saved):
// OWN:           = rt.all_reduce(self, [{{.*}}], reduction='sum')
// OWN-NEXT:      rt.dense_update(self, 'emb_l.1',
