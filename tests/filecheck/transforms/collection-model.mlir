// TorchRec's EmbeddingCollection from export to the rows path: the parity tests'
// CollectionModel (a KeyedJaggedTensor's jagged histories of at most 4 items and one target
// per sample, looked up unpooled from one item table; their categories from a cat table;
// pooled user bags), table-wise on 2 ranks. Each jagged key becomes one feature per position
// up to its longest bag; each of the collection's tables is a group of its own, so
// lift-sparse{rows=jagged} sends its rows one per id (compact-rows).
// RUN: sparselift export %S/../../runtime/parity_models.py:collection_model --world-size 2 --batch-size 8 --seed 0 --sharding table_wise | filecheck %s --check-prefix=EXPORT
// RUN: sparselift export %S/../../runtime/parity_models.py:collection_model --world-size 2 --batch-size 8 --seed 0 --sharding table_wise | sparselift-opt -p 'lift-sparse{rows=jagged}' | filecheck %s --check-prefix=ROWS

// EXPORT:      sparse.embedding_bag_collection "ec" {{.*}} tables = [#sparse.table<"ec.embeddings.item", rows = 60, dim = 8, f32, none, distinct = 0.77>]
// EXPORT-SAME: features = [#sparse.feature<"hist[0]" -> "ec.embeddings.item", {{.*}}>, #sparse.feature<"hist[1]" {{.*}}>, #sparse.feature<"hist[2]" {{.*}}>, #sparse.feature<"hist[3]" {{.*}}>, #sparse.feature<"target" -> "ec.embeddings.item", pooling_factor = 1.0>]
// EXPORT-SAME: {group = "ec/table_wise/item"}
// EXPORT:      sparse.embedding_bag_collection "ec" {{.*}} tables = [#sparse.table<"ec.embeddings.cat", rows = 12, dim = 8, f32, none, distinct = 0.39>]
// EXPORT-SAME: {group = "ec/table_wise/cat"}
// EXPORT:      sparse.embedding_bag_collection "user" {{.*}} tables = [#sparse.table<"user", rows = 40, dim = 6, f32, sum>]

// ROWS:        sparse.gather_rows {{.*}} table = #sparse.table<"ec.embeddings.item", {{.*}}> {{.*}} slots = [0, 1, 2, 3, 4] {group = "ec/table_wise/item"}
// ROWS-NEXT:   sparse.row_splits
// ROWS-NEXT:   coll.all_to_all {{.*}} role #coll.role<output_rows> send_splits
// ROWS-NEXT:   sparse.expand_rows
// ROWS:        sparse.gather_rows {{.*}} table = #sparse.table<"ec.embeddings.cat", {{.*}}> {{.*}} {group = "ec/table_wise/cat"}
// ROWS:        } backward {
// ROWS:        sparse.rows_update {{.*}} table = #sparse.table<"ec.embeddings.cat"
// ROWS:        sparse.rows_update {{.*}} table = #sparse.table<"ec.embeddings.item"
