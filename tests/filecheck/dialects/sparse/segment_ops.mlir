// RUN: sparselift-opt %s --split-input-file | sparselift-opt --split-input-file | filecheck %s
// RUN: sparselift-opt %s --split-input-file --print-op-generic | sparselift-opt --split-input-file | filecheck %s

// Two output exchanges of 2 ranks as one dynamic exchange: an unpooled table's rows, one per id
// (sized at run time), and a pooled table's vectors (static splits, one pack per rank). The
// static side's sizes come from its splits; the join puts each peer's rows and then its pooled
// vectors in one buffer; the split gives each side what its own exchange returned.
// CHECK-LABEL: sched.step @merged world_size = 2 outputs = 2 {
// CHECK:         %send, %recv = sparse.static_sizes splits #coll.splits<{{\[\[}}0, 0], [4, 4]]> role #coll.role<output_pooled> : tensor<2xi64>, tensor<2xi64>
// CHECK-NEXT:    %buf, %bsend, %brecv = sparse.join_segments(%rows) (%p0, %p1) send(%rsend, %send) recv(%rrecv, %recv) : (tensor<?xf32>) (tensor<?xf32>, tensor<?xf32>), tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<2xi64>, tensor<2xi64>
// CHECK-NEXT:    %got, %got_sizes = coll.all_to_all %buf on #coll.group<[0, 1]> role #coll.role<output_rows, output_pooled> send_splits(%bsend : tensor<2xi64>) recv_splits(%brecv : tensor<2xi64>) : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
// CHECK-NEXT:    %r, %p = sparse.split_segments %got recv(%rrecv, %recv) : tensor<?xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<?xf32>
sched.step @merged world_size = 2 outputs = 2 {
^bb0(%rows: tensor<?xf32>, %rsend: tensor<2xi64>, %rrecv: tensor<2xi64>, %pooled: tensor<?x4xf32>):
  %p0 = sparse.pack layout = #sparse.layout<[[], []]> on_rank 0 : -> tensor<?xf32>
  %p1 = sparse.pack %pooled layout = #sparse.layout<[[0 : 4], [0 : 4]]> on_rank 1 : tensor<?x4xf32> -> tensor<?xf32>
  %send, %recv = sparse.static_sizes splits #coll.splits<[[0, 0], [4, 4]]> role #coll.role<output_pooled> : tensor<2xi64>, tensor<2xi64>
  %buf, %bsend, %brecv = sparse.join_segments(%rows) (%p0, %p1) send(%rsend, %send) recv(%rrecv, %recv) : (tensor<?xf32>) (tensor<?xf32>, tensor<?xf32>), tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<2xi64>, tensor<2xi64>
  %got, %got_sizes = coll.all_to_all %buf on #coll.group<[0, 1]> role #coll.role<output_rows, output_pooled> send_splits(%bsend : tensor<2xi64>) recv_splits(%brecv : tensor<2xi64>) : tensor<?xf32> -> tensor<?xf32>, tensor<2xi64>
  %r, %p = sparse.split_segments %got recv(%rrecv, %recv) : tensor<?xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<?xf32>, tensor<?xf32>
  %pv = sparse.unpack %p layout = #sparse.layout<[[0 : 0], [0 : 4]]> : tensor<?xf32> -> tensor<?x4xf32>
  sched.yield %r, %pv : tensor<?xf32>, tensor<?x4xf32>
} backward {
^bb1(%g0: tensor<?xf32>, %g1: tensor<?x4xf32>):
  sched.yield
}
