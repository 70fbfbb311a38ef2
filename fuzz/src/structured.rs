//! Structured ONNX: a model built from fuzzer bytes through [`arbitrary`], so that the input
//! is always a well-formed protobuf model with plausible parts (operators the importer
//! supports, attribute names it reads, small shapes, initializers whose data fits their
//! dimensions) and the fuzzer spends its time in the importer's deep paths rather than in
//! the protobuf decoder.
//!
//! A [`Model`] is a list of graph inputs, initializers and nodes; every node input names an
//! earlier value by index (modulo the values defined so far), so most graphs are connected.
//! [`Model::encode`] turns it into a `ModelProto` with the messages of the importer's own
//! `onnx/proto/onnx.proto` and encodes it.

use arbitrary::Arbitrary;
use prost::Message;

#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    unreachable_pub,
    dead_code
)]
mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

use proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType,
    tensor_shape_proto, type_proto,
};

/// Attribute names the importer's operators read.
const ATTR_NAMES: &[&str] = &[
    "axis",
    "axes",
    "alpha",
    "beta",
    "epsilon",
    "mode",
    "value",
    "keepdims",
    "perm",
    "pads",
    "strides",
    "dilations",
    "kernel_shape",
    "group",
    "auto_pad",
    "ceil_mode",
    "transA",
    "transB",
    "to",
    "split",
    "num_outputs",
    "starts",
    "ends",
    "scales",
    "output_shape",
    "output_padding",
    "count_include_pad",
    "storage_order",
    "reduction",
    "largest",
    "sorted",
    "k",
    "exclusive",
    "reverse",
    "direction",
    "hidden_size",
    "activations",
    "activation_alpha",
    "activation_beta",
    "linear_before_reset",
    "layout",
    "equation",
    "batch_dims",
    "select_last_index",
    "noop_with_empty_axes",
    "stash_type",
    "min",
    "max",
    "lambd",
    "bias",
    "gamma",
    "size",
    "blocksize",
    "dtype",
    "approximate",
    "allowzero",
    "upper",
    "num_heads",
    "q_num_heads",
    "kv_num_heads",
    "is_causal",
    "scale",
    "softcap",
    "coordinate_transformation_mode",
    "nearest_mode",
    "cubic_coeff_a",
    "exclude_outside",
    "extrapolation_value",
    "antialias",
    "keep_aspect_ratio_policy",
    "value_int",
    "value_ints",
    "value_float",
    "value_floats",
    "value_string",
    "ignore_index",
    "spatial",
    "training_mode",
    "fmod",
    "interleaved",
    "rotary_embedding_dim",
    "detect_positive",
    "detect_negative",
    "input_forget",
    "clip",
    "broadcast",
    "num_groups",
    "softmax_precision",
    "qk_matmul_output_mode",
    "start",
    "end",
    "taps",
];

/// String attribute values the importer's operators recognise.
const STRINGS: &[&str] = &[
    "",
    "NOTSET",
    "SAME_UPPER",
    "SAME_LOWER",
    "VALID",
    "constant",
    "reflect",
    "edge",
    "wrap",
    "nearest",
    "linear",
    "cubic",
    "half_pixel",
    "asymmetric",
    "align_corners",
    "pytorch_half_pixel",
    "tf_crop_and_resize",
    "half_pixel_symmetric",
    "round_prefer_floor",
    "round_prefer_ceil",
    "floor",
    "ceil",
    "stretch",
    "not_larger",
    "not_smaller",
    "none",
    "mean",
    "sum",
    "add",
    "mul",
    "max",
    "min",
    "forward",
    "reverse",
    "bidirectional",
    "Tanh",
    "Sigmoid",
    "Relu",
    "tanh",
    "DCR",
    "CRD",
    "ij,jk->ik",
    "bij,bjk->bik",
    "ii->i",
    "i,i->",
    "...ij->...ji",
    "abc,cd->abd",
    "ij->",
    "x",
];

/// ONNX element types: mostly supported ones, and a few that are not.
const ELEMS: &[i32] = &[1, 1, 1, 7, 7, 6, 9, 11, 10, 16, 3, 2, 5, 4, 8, 12, 13, 14];

/// A model: inputs, initializers, nodes and the values it outputs.
#[derive(Arbitrary, Debug)]
pub struct Model {
    opset: u8,
    ir_version: u8,
    inputs: Vec<Input>,
    initializers: Vec<Init>,
    nodes: Vec<Node>,
    outputs: Vec<u8>,
}

/// A graph input with a declared type.
#[derive(Arbitrary, Debug)]
struct Input {
    elem: u8,
    dims: Vec<DimSpec>,
}

/// One declared extent of a graph input.
#[derive(Arbitrary, Debug)]
enum DimSpec {
    Static(u8),
    Symbol(u8),
    Unknown,
}

/// An initializer (also the payload of a tensor attribute).
#[derive(Arbitrary, Debug)]
struct Init {
    elem: u8,
    dims: Vec<u8>,
    data: Data,
}

/// How an initializer's data is stored.
#[derive(Arbitrary, Debug)]
enum Data {
    /// Small integers converted to the element type, in the typed field for it.
    Small(Vec<i8>),
    /// Raw bytes, padded or cut to the size the dimensions ask for.
    Raw(Vec<u8>),
    /// Raw bytes exactly as given (possibly the wrong size).
    RawExact(Vec<u8>),
    /// No data at all.
    Empty,
}

/// A node: an operator (an index into the importer's supported set), inputs naming earlier
/// values, attributes and its number of outputs.
#[derive(Arbitrary, Debug)]
struct Node {
    op: u16,
    inputs: Vec<Ref>,
    outputs: u8,
    attrs: Vec<Attr>,
}

/// A node input.
#[derive(Arbitrary, Debug)]
enum Ref {
    /// The value with this index among those defined so far (modulo their number).
    Value(u8),
    /// An omitted optional input (the empty name).
    Omitted,
    /// A name nothing defines.
    Dangling,
}

/// An attribute: a name from [`ATTR_NAMES`] and a value.
#[derive(Arbitrary, Debug)]
struct Attr {
    name: u8,
    value: AttrValue,
}

#[derive(Arbitrary, Debug)]
enum AttrValue {
    Int(i8),
    BigInt(i64),
    Ints(Vec<i8>),
    Float(f32),
    Floats(Vec<f32>),
    Str(u8),
    Strings(Vec<u8>),
    Tensor(Init),
}

/// Cuts a fuzzer-chosen length down to `max`.
fn take<T>(v: &[T], max: usize) -> &[T] {
    &v[..v.len().min(max)]
}

fn elem(code: u8) -> i32 {
    ELEMS[usize::from(code) % ELEMS.len()]
}

fn elem_size(code: i32) -> usize {
    match code {
        1 | 6 | 12 => 4,
        7 | 11 | 13 | 14 => 8,
        10 | 16 | 5 | 4 => 2,
        _ => 1,
    }
}

impl Init {
    fn tensor(&self, name: String) -> TensorProto {
        let data_type = elem(self.elem);
        let dims: Vec<i64> = take(&self.dims, 4)
            .iter()
            .map(|&d| i64::from(d % 9))
            .collect();
        let count = dims.iter().map(|&d| d as usize).product::<usize>();
        let mut t = TensorProto {
            dims,
            data_type: Some(data_type),
            name: Some(name),
            ..TensorProto::default()
        };
        match &self.data {
            Data::Small(v) => {
                let v: Vec<i8> = (0..count).map(|i| v.get(i).copied().unwrap_or(1)).collect();
                match data_type {
                    1 => t.float_data = v.iter().map(|&x| f32::from(x)).collect(),
                    11 => t.double_data = v.iter().map(|&x| f64::from(x)).collect(),
                    7 => t.int64_data = v.iter().map(|&x| i64::from(x)).collect(),
                    12 | 13 => t.uint64_data = v.iter().map(|&x| x as u64).collect(),
                    8 => t.string_data = v.iter().map(|x| x.to_string().into()).collect(),
                    _ => t.int32_data = v.iter().map(|&x| i32::from(x)).collect(),
                }
            }
            Data::Raw(bytes) => {
                let n = count * elem_size(data_type);
                let raw: Vec<u8> = (0..n).map(|i| bytes.get(i).copied().unwrap_or(0)).collect();
                t.raw_data = Some(raw.into());
            }
            Data::RawExact(bytes) => t.raw_data = Some(take(bytes, 4096).to_vec().into()),
            Data::Empty => {}
        }
        t
    }
}

fn value_info(name: String, ty: Option<TypeProto>) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name),
        r#type: ty,
    }
}

impl Input {
    fn value_info(&self, name: String) -> ValueInfoProto {
        let dim = take(&self.dims, 5)
            .iter()
            .map(|d| tensor_shape_proto::Dimension {
                value: match d {
                    DimSpec::Static(n) => Some(tensor_shape_proto::dimension::Value::DimValue(
                        i64::from(n % 9),
                    )),
                    DimSpec::Symbol(s) => Some(tensor_shape_proto::dimension::Value::DimParam(
                        format!("s{}", s % 4),
                    )),
                    DimSpec::Unknown => None,
                },
                denotation: None,
            })
            .collect();
        let ty = TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem(self.elem)),
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: None,
        };
        value_info(name, Some(ty))
    }
}

impl Attr {
    fn proto(&self, node: usize, k: usize) -> AttributeProto {
        let name = ATTR_NAMES[usize::from(self.name) % ATTR_NAMES.len()];
        let mut a = AttributeProto {
            name: Some(name.to_string()),
            ..AttributeProto::default()
        };
        let ty = match &self.value {
            AttrValue::Int(i) => {
                a.i = Some(i64::from(*i));
                AttributeType::Int
            }
            AttrValue::BigInt(i) => {
                a.i = Some(*i);
                AttributeType::Int
            }
            AttrValue::Ints(v) => {
                a.ints = take(v, 8).iter().map(|&x| i64::from(x)).collect();
                AttributeType::Ints
            }
            AttrValue::Float(f) => {
                a.f = Some(*f);
                AttributeType::Float
            }
            AttrValue::Floats(v) => {
                a.floats = take(v, 8).to_vec();
                AttributeType::Floats
            }
            AttrValue::Str(s) => {
                a.s = Some(
                    STRINGS[usize::from(*s) % STRINGS.len()]
                        .as_bytes()
                        .to_vec()
                        .into(),
                );
                AttributeType::String
            }
            AttrValue::Strings(v) => {
                a.strings = take(v, 4)
                    .iter()
                    .map(|&s| {
                        STRINGS[usize::from(s) % STRINGS.len()]
                            .as_bytes()
                            .to_vec()
                            .into()
                    })
                    .collect();
                AttributeType::Strings
            }
            AttrValue::Tensor(t) => {
                a.t = Some(t.tensor(format!("attr{node}_{k}")));
                AttributeType::Tensor
            }
        };
        a.r#type = Some(ty as i32);
        a
    }
}

impl Model {
    /// The model as a `ModelProto`, with the importer's supported operators `ops` (sorted, as
    /// [`tessera_onnx::supported_ops`] gives them).
    fn proto(&self, ops: &[&str]) -> ModelProto {
        let mut values: Vec<String> = Vec::new();
        let mut graph = GraphProto {
            name: Some("fuzz".into()),
            ..GraphProto::default()
        };
        for (i, input) in take(&self.inputs, 4).iter().enumerate() {
            let name = format!("in{i}");
            graph.input.push(input.value_info(name.clone()));
            values.push(name);
        }
        for (i, init) in take(&self.initializers, 6).iter().enumerate() {
            let name = format!("w{i}");
            graph.initializer.push(init.tensor(name.clone()));
            values.push(name);
        }
        for (n, node) in take(&self.nodes, 10).iter().enumerate() {
            let op = ops[usize::from(node.op) % ops.len()];
            let input = take(&node.inputs, 6)
                .iter()
                .map(|r| match r {
                    Ref::Value(i) if !values.is_empty() => {
                        values[usize::from(*i) % values.len()].clone()
                    }
                    Ref::Value(_) | Ref::Omitted => String::new(),
                    Ref::Dangling => "undefined".into(),
                })
                .collect();
            let output: Vec<String> = (0..1 + node.outputs % 3)
                .map(|k| format!("n{n}_{k}"))
                .collect();
            let attribute = take(&node.attrs, 6)
                .iter()
                .enumerate()
                .map(|(k, a)| a.proto(n, k))
                .collect();
            graph.node.push(NodeProto {
                input,
                output: output.clone(),
                name: Some(format!("node{n}")),
                op_type: Some(op.to_string()),
                domain: None,
                attribute,
            });
            values.extend(output);
        }
        let mut outputs: Vec<String> = take(&self.outputs, 4)
            .iter()
            .filter(|_| !values.is_empty())
            .map(|&i| values[usize::from(i) % values.len()].clone())
            .collect();
        if outputs.is_empty() {
            // By default the last node's first output, so most models have one.
            outputs.extend(graph.node.last().and_then(|n| n.output.first().cloned()));
        }
        graph.output = outputs.into_iter().map(|n| value_info(n, None)).collect();
        ModelProto {
            ir_version: Some(3 + i64::from(self.ir_version % 12)),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(7 + i64::from(self.opset % 22)),
            }],
            producer_name: Some("tessera-fuzz".into()),
            graph: Some(graph),
            ..ModelProto::default()
        }
    }

    /// The model's protobuf encoding.
    pub fn encode(&self, ops: &[&str]) -> Vec<u8> {
        self.proto(ops).encode_to_vec()
    }
}
