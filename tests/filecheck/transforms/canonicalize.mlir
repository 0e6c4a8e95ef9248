// RUN: sparselift-opt %s --split-input-file -p canonicalize | filecheck %s

// An all-to-all over a one-rank group moves nothing and folds away.
// CHECK-LABEL: sched.step @single_rank_all_to_all
// CHECK-NOT:     coll.all_to_all
// CHECK:         sched.yield %x : tensor<?xi32>
sched.step @single_rank_all_to_all world_size = 1 outputs = 1 {
^bb0(%x: tensor<?xi32>):
  %y = coll.all_to_all %x on #coll.group<[0]> role #coll.role<input_lengths> splits #coll.splits<[[4]]> : tensor<?xi32> -> tensor<?xi32>
  sched.yield %y : tensor<?xi32>
} backward {
^bb0(%g: tensor<?xi32>):
  sched.yield
}
