// RUN: sparselift-opt %S/../inputs/sequence-ws2.mlir -p 'lift-sparse{rows=jagged},aggregate-comm' -t plan-module | filecheck %s

// A merged dynamic exchange (rows one per id with pooled vectors, sequence-ws2: `item` and `cat`
// unpooled, `user` and `tags` pooled on rank 1) in the plan module. The pooled packs feed the
// join, not the exchange, yet they hold every receiver's samples (batches.ranks: outputs go back
// to the samples' ranks, whose batches may differ), as their static sizes count them; the split
// results feed the rows' expand and the pooled unpack (this rank's own samples).
// CHECK:       def _segment_0_forward(
// CHECK:       [[ROWS:v[0-9]+]], [[RS:v[0-9]+]], [[RR:v[0-9]+]] = rt.join_segments(self, [v{{[0-9]+}}], [v{{[0-9]+}}],
// CHECK:       [[P0:v[0-9]+]] = rt.pack(self, [], LAYOUT_{{[0-9]+}}, torch.float32, batch=batches.ranks)
// CHECK:       [[P1:v[0-9]+]] = rt.pack(self, [v{{[0-9]+}}, v{{[0-9]+}}], LAYOUT_{{[0-9]+}}, torch.float32, batch=batches.ranks)
// CHECK:       [[SEND:v[0-9]+]], [[RECV:v[0-9]+]] = rt.static_sizes(self, splits=SPLITS_{{[0-9]+}}, role='output_pooled', batches=batches.ranks)
// CHECK-NEXT:  [[BUF:v[0-9]+]], [[BS:v[0-9]+]], [[BR:v[0-9]+]] = rt.join_segments(self, [[[ROWS]]], [[[P0]], [[P1]]], [[RS]], [[SEND]], [[RR]], [[RECV]])
// CHECK-NEXT:  [[GOT:v[0-9]+]], v{{[0-9]+}} = rt.all_to_all_dynamic(self, [[[BUF]]], [[BS]], [[BR]], role='output_rows+output_pooled')
// CHECK-NEXT:  [[R:v[0-9]+]], [[P:v[0-9]+]] = rt.split_segments(self, [[GOT]], [[RR]], [[RECV]])
// CHECK-NEXT:  v{{[0-9]+}}, v{{[0-9]+}} = rt.split_segments(self, [[R]],
// CHECK:       rt.unpack(self, [[P]], LAYOUT_{{[0-9]+}}, (6, 4), batch=batches.own)
// Backward: the gradients go to the tables' ranks; the static sizes count the senders' samples.
// CHECK:       def _segment_0_backward(
// CHECK:       rt.static_sizes(self, splits=SPLITS_{{[0-9]+}}, role='grad_pooled', batches=batches.ranks)
// CHECK:       rt.all_to_all_dynamic(self, [v{{[0-9]+}}], v{{[0-9]+}}, v{{[0-9]+}}, role='grad_pooled+grad_rows')
// CHECK:       rt.unpack(self, v{{[0-9]+}}, LAYOUT_{{[0-9]+}}, (4, 6), batch=batches.ranks)
