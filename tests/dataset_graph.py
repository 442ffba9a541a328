"""Read a tf.data pipeline's structure from its serialized graph: which transformations it applies,
in which order, with which arguments, and which TensorFlow ops each mapped function runs."""
import dataclasses

import tensorflow as tf


@dataclasses.dataclass
class Stage:
    op: str  # e.g. "ParallelMapDatasetV2", "CacheDatasetV2", "ShuffleDatasetV3"
    constants: list  # the values of its constant inputs (after the input dataset), in order
    function_ops: set  # every op the stage's function runs, nested functions included
    attrs: dict


def stages(dataset: tf.data.Dataset) -> list[Stage]:
    """The dataset's transformations from the first to the last (the main input chain)."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    nodes = {node.name: node for node in graph.node}
    functions = {function.signature.name: function for function in graph.library.function}

    def ops_of(name, seen):
        if name in seen or name not in functions:
            return set()
        seen.add(name)
        found = set()
        for node in functions[name].node_def:
            found.add(node.op)
            for value in node.attr.values():
                if value.func.name:
                    found |= ops_of(value.func.name, seen)
        return found

    chain = []
    node = nodes[next(n.name for n in graph.node if n.op == "_Retval")]
    while node.input:
        node = nodes[node.input[0].split(":")[0]]
        constants = [constant(nodes[name.split(":")[0]]) for name in node.input[1:]
                     if nodes[name.split(":")[0]].op == "Const"]
        function_ops = set()
        for value in node.attr.values():
            if value.func.name:
                function_ops |= ops_of(value.func.name, set())
        chain.append(Stage(node.op, constants, function_ops, {key: node.attr[key] for key in node.attr}))
    return chain[::-1]


def constant(node):
    """A Const node's value; None for a resource handle (a cache's memory, a seed generator)."""
    if node.attr["value"].tensor.dtype == tf.resource.as_datatype_enum:
        return None
    return tf.make_ndarray(node.attr["value"].tensor).tolist()


def ops(dataset: tf.data.Dataset) -> list[str]:
    return [stage.op for stage in stages(dataset)]
