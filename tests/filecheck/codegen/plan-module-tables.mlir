// The plan module's TABLES: every table's facts read from the IR (sparselift.codegen.table_facts),
// on the exported two-tower fixture (../inputs/two-tower-ws2.mlir): the state-dict name the step's
// `table_params` gives, placements as shards per rank, weighted features, the update's optimizer
// and its hyperparameter group (user.emb.2 in its own, with Adam) and the generated kernels' spec.
// RUN: sparselift-opt %S/../inputs/two-tower-ws2.mlir -p 'lift-sparse{optimizer=rowwise_adagrad table-optimizers="user.emb.2=adam:1"}' -t plan-module | filecheck %s

// CHECK:      from sparselift.codegen.ckernels import TableSpec
// CHECK-NEXT: from sparselift.codegen.table_facts import TableFact
// CHECK:      TABLES = (
// CHECK-NEXT:   TableFact(name='user.emb.0', param='user.emb.0.weight', rows=100000, dim=32, dtype='f32', index_dtype='i64', pooling='sum', placement='table_wise', ranks=(1,), row_bounds=(), shards=((1, 0, 100000),), weighted=False, features=('user_indices_0',), module='', optimizer='rowwise_adagrad', optimizer_group=0, kernel_spec=TableSpec(dim=32, dtype='f32', index_dtype='i64', pooling='sum', weighted=False, optimizer='rowwise_adagrad')),
// CHECK-NEXT:   TableFact(name='user.emb.1', {{.*}} pooling='mean', placement='table_wise', ranks=(0,), {{.*}} shards=((0, 0, 500000),),
// CHECK-NEXT:   TableFact(name='user.emb.2', {{.*}} weighted=True, features=('user_indices_2',), {{.*}} optimizer='adam', optimizer_group=1, {{.*}} weighted=True, optimizer='adam')),
// CHECK-NEXT:   TableFact(name='item.emb.0',
// CHECK-NEXT:   TableFact(name='item.emb.1', {{.*}} placement='data_parallel', ranks=(), row_bounds=(), shards=((0, 0, 500), (1, 0, 500)),
// CHECK-NEXT:   TableFact(name='item.tag_weight', param='item.tag_weight', rows=10000,
// CHECK-NEXT: )
// CHECK:      class Plan(rt.PlanBase):
// CHECK:        TABLES = TABLES
