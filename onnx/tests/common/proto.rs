//! A minimal subset of the ONNX protobuf messages, for tests: enough to write small models
//! (and read op types back from test models) without the importer's private types. Field
//! tags follow `onnx/proto/onnx.proto`; fields not listed are skipped when decoding.

#![allow(dead_code, missing_docs)]

use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct Model {
    #[prost(int64, optional, tag = "1")]
    pub ir_version: Option<i64>,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OpsetId>,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphP>,
}

#[derive(Clone, PartialEq, Message)]
pub struct OpsetId {
    #[prost(string, optional, tag = "1")]
    pub domain: Option<String>,
    #[prost(int64, optional, tag = "2")]
    pub version: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct GraphP {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeP>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorP>,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfo>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfo>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeP {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub op_type: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub domain: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<Attribute>,
}

/// The subgraph fields (to walk nested graphs) and the int, float, ints and string values.
#[derive(Clone, PartialEq, Message)]
pub struct Attribute {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "6")]
    pub g: Option<GraphP>,
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphP>,
    /// `AttributeProto.AttributeType`: 1 float, 2 int, 3 string, 7 ints, 5 graph.
    #[prost(int32, optional, tag = "20")]
    pub r#type: Option<i32>,
    #[prost(float, optional, tag = "2")]
    pub f: Option<f32>,
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    #[prost(bytes = "vec", optional, tag = "4")]
    pub s: Option<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueInfo {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeP>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeP {
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TensorTypeP>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorTypeP {
    #[prost(int32, optional, tag = "1")]
    pub elem_type: Option<i32>,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<ShapeP>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ShapeP {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<DimP>,
}

#[derive(Clone, PartialEq, Message)]
pub struct DimP {
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorP {
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, optional, tag = "2")]
    pub data_type: Option<i32>,
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    #[prost(string, optional, tag = "8")]
    pub name: Option<String>,
    #[prost(bytes = "vec", optional, tag = "9")]
    pub raw_data: Option<Vec<u8>>,
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<Entry>,
    #[prost(int32, optional, tag = "14")]
    pub data_location: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Entry {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// ONNX `TensorProto.DataType` codes used in tests.
pub const FLOAT: i32 = 1;
/// `TensorProto.DataType.BOOL`.
pub const BOOL: i32 = 9;
/// int32.
pub const INT32: i32 = 6;
/// int64.
pub const INT64: i32 = 7;
/// string.
pub const STRING: i32 = 8;

/// A node `op_type(inputs) -> outputs` named `name`.
pub fn node(op_type: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeP {
    NodeP {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.to_string()),
        op_type: Some(op_type.to_string()),
        domain: None,
        attribute: Vec::new(),
    }
}

/// A tensor value: `dims` entries that parse as integers are static, others symbolic.
pub fn value(name: &str, elem: i32, dims: &[&str]) -> ValueInfo {
    ValueInfo {
        name: Some(name.to_string()),
        r#type: Some(TypeP {
            tensor_type: Some(TensorTypeP {
                elem_type: Some(elem),
                shape: Some(ShapeP {
                    dim: dims
                        .iter()
                        .map(|d| match d.parse::<i64>() {
                            Ok(n) => DimP {
                                dim_value: Some(n),
                                dim_param: None,
                            },
                            Err(_) => DimP {
                                dim_value: None,
                                dim_param: Some(d.to_string()),
                            },
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

/// An f32 initializer with data in `float_data`.
pub fn float_init(name: &str, dims: &[i64], data: &[f32]) -> TensorP {
    TensorP {
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        float_data: data.to_vec(),
        name: Some(name.to_string()),
        ..Default::default()
    }
}

/// An i64 initializer with data in `int64_data`.
pub fn int64_init(name: &str, dims: &[i64], data: &[i64]) -> TensorP {
    TensorP {
        dims: dims.to_vec(),
        data_type: Some(INT64),
        int64_data: data.to_vec(),
        name: Some(name.to_string()),
        ..Default::default()
    }
}

/// An int attribute.
pub fn attr_i(name: &str, i: i64) -> Attribute {
    Attribute {
        name: Some(name.to_string()),
        r#type: Some(2),
        i: Some(i),
        ..Default::default()
    }
}

/// A float attribute.
pub fn attr_f(name: &str, f: f32) -> Attribute {
    Attribute {
        name: Some(name.to_string()),
        r#type: Some(1),
        f: Some(f),
        ..Default::default()
    }
}

/// A string attribute.
pub fn attr_s(name: &str, s: &str) -> Attribute {
    Attribute {
        name: Some(name.to_string()),
        r#type: Some(3),
        s: Some(s.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// A strings attribute.
pub fn attr_strings(name: &str, strings: &[&str]) -> Attribute {
    Attribute {
        name: Some(name.to_string()),
        r#type: Some(8),
        strings: strings.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..Default::default()
    }
}

/// An ints attribute.
pub fn attr_ints(name: &str, ints: &[i64]) -> Attribute {
    Attribute {
        name: Some(name.to_string()),
        r#type: Some(7),
        ints: ints.to_vec(),
        ..Default::default()
    }
}

/// A model at opset `opset` of the default domain (IR version 8).
pub fn model(opset: i64, graph: GraphP) -> Model {
    Model {
        ir_version: Some(8),
        opset_import: vec![OpsetId {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(graph),
    }
}

/// A graph named `name`.
pub fn graph(
    name: &str,
    nodes: Vec<NodeP>,
    inputs: Vec<ValueInfo>,
    outputs: Vec<ValueInfo>,
) -> GraphP {
    GraphP {
        node: nodes,
        name: Some(name.to_string()),
        initializer: Vec::new(),
        input: inputs,
        output: outputs,
    }
}

/// Writes a model to `path`.
pub fn write(path: &std::path::Path, m: &Model) {
    std::fs::write(path, m.encode_to_vec()).expect("write model");
}

/// The op types of every node of a graph, subgraphs included.
pub fn op_types(g: &GraphP, out: &mut Vec<String>) {
    for n in &g.node {
        out.push(n.op_type.clone().unwrap_or_default());
        for a in &n.attribute {
            if let Some(sub) = &a.g {
                op_types(sub, out);
            }
            for sub in &a.graphs {
                op_types(sub, out);
            }
        }
    }
}
