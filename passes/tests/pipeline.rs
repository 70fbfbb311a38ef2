//! Pipeline text: parsing, canonical printing, round trips and errors.

use tessera_passes::Pipeline;

#[test]
fn pipelines_print_canonically_and_round_trip() {
    let cases = [
        ("", ""),
        ("dce", "dce"),
        (" cse , dce ", "cse,dce"),
        (
            "canonicalize",
            "canonicalize{fold-limit=65536 fold-moves=true max-iterations=10}",
        ),
        (
            "canonicalize{max-iterations=3}",
            "canonicalize{fold-limit=65536 fold-moves=true max-iterations=3}",
        ),
        (
            "canonicalize{ max-iterations = 3  fold-limit=0 fold-moves=false },cse",
            "canonicalize{fold-limit=0 fold-moves=false max-iterations=3},cse",
        ),
        (
            "shape-infer{shapes=\"x=1x3;y=2\"}",
            "shape-infer{shapes=\"x=1x3;y=2\" dims=\"\"}",
        ),
        (
            "shape-infer{dims=N=1}",
            "shape-infer{shapes=\"\" dims=\"N=1\"}",
        ),
        (
            "shape-infer{dims=\"a \\\"q\\\"\"}",
            "shape-infer{shapes=\"\" dims=\"a \\\"q\\\"\"}",
        ),
    ];
    for (text, canonical) in cases {
        let p = Pipeline::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(p.to_string(), canonical, "printing `{text}`");
        let again = Pipeline::parse(&p.to_string()).expect("canonical text parses");
        assert_eq!(again, p, "round trip of `{text}`");
        assert_eq!(again.to_string(), canonical);
    }
}

#[test]
fn pipeline_errors_name_the_closest_valid_names() {
    let cases = [
        (
            "canonicalise",
            "pipeline column 1: unknown pass `canonicalise`; did you mean `canonicalize`?",
        ),
        (
            "cse,dec",
            "pipeline column 5: unknown pass `dec`; did you mean `dce`?",
        ),
        (
            "frobnicate",
            "pipeline column 1: unknown pass `frobnicate`; passes: bucket-all-reduce, canonicalize, cse, dce, grad, shape-infer, shard-state, train",
        ),
        (
            "canonicalize{max-iteration=2}",
            "pipeline column 14: unknown option `max-iteration` of pass `canonicalize`; did you mean `max-iterations`?",
        ),
        (
            "cse{x=1}",
            "pipeline column 5: unknown option `x` of pass `cse`; `cse` has no options",
        ),
        (
            "canonicalize{max-iterations=-1}",
            "pipeline column 29: option `max-iterations` of `canonicalize` takes a uint: `-1` is not a non-negative integer",
        ),
        (
            "canonicalize{max-iterations=1 max-iterations=2}",
            "pipeline column 31: option `max-iterations` given twice",
        ),
        (
            "canonicalize{max-iterations=1",
            "unclosed `{` in the options of `canonicalize`",
        ),
        ("cse,,dce", "pipeline column 5: expected a pass name"),
        (
            "cse dce",
            "pipeline column 5: expected `,` or the end of the pipeline, found `d`",
        ),
        ("shape-infer{dims=\"N=1}", "unterminated string"),
        (
            "cse é",
            "pipeline column 5: expected `,` or the end of the pipeline, found `é`",
        ),
        (
            "shape-infer{dims=\"é",
            "pipeline column 20: unterminated string",
        ),
    ];
    for (text, want) in cases {
        let err = Pipeline::parse(text).expect_err(text).to_string();
        assert!(
            err.contains(want),
            "`{text}`: expected `{want}`, got `{err}`"
        );
    }
}
