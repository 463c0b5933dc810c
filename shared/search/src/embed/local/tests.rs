//! The static model with the real test model (WordLlama l2_supercat 256,
//! from the `wordllama` wheel: `scripts/test-model` lays it out).

use super::*;
use crate::testkit::test_model;

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn the_test_model_is_the_shipped_spec_and_embeds_by_meaning() {
    let dir = test_model();
    assert_eq!(check(&dir, &WORDLLAMA_L2_256), State::Ready);
    let model = StaticModel::load(&dir, &WORDLLAMA_L2_256).unwrap();
    assert_eq!(model.dimensions(), 256);
    let v = model
        .embed(&[
            "the file upload did not work",
            "uploading files failed",
            "the dark mode colour palette",
            "",
        ])
        .unwrap();
    for vector in &v[..3] {
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }
    assert!(v[3].iter().all(|x| *x == 0.0), "no token, no direction");
    assert!(
        cos(&v[0], &v[1]) > cos(&v[0], &v[2]) + 0.05,
        "related {} vs unrelated {}",
        cos(&v[0], &v[1]),
        cos(&v[0], &v[2])
    );
    // Deterministic: the same text, the same bits.
    let again = model.embed(&["uploading files failed"]).unwrap();
    assert_eq!(again[0], v[1]);
}

#[test]
fn a_missing_cut_or_altered_file_is_reported_and_never_loaded() {
    let source = test_model();
    let dir = tempfile::tempdir().unwrap();
    let spec = &WORDLLAMA_L2_256;
    assert_eq!(check(dir.path(), spec), State::Missing);
    let err = StaticModel::load(dir.path(), spec).unwrap_err();
    assert!(
        err.contains("not set up") && err.contains("mc-doctor setup"),
        "{err}"
    );

    std::fs::copy(source.join(TOKENIZER), dir.path().join(TOKENIZER)).unwrap();
    let State::Broken(why) = check(dir.path(), spec) else {
        panic!("one file of two is broken")
    };
    assert!(why.contains("model.safetensors"), "{why}");

    let weights = std::fs::read(source.join(WEIGHTS)).unwrap();
    std::fs::write(dir.path().join(WEIGHTS), &weights[..weights.len() / 2]).unwrap();
    let State::Broken(why) = check(dir.path(), spec) else {
        panic!("cut")
    };
    assert!(why.contains("cut short"), "{why}");

    let mut altered = weights.clone();
    let last = altered.len() - 1;
    altered[last] ^= 1;
    std::fs::write(dir.path().join(WEIGHTS), &altered).unwrap();
    let err = StaticModel::load(dir.path(), spec).unwrap_err();
    assert!(err.contains("damaged") && err.contains("SHA-256"), "{err}");

    std::fs::write(dir.path().join(WEIGHTS), &weights).unwrap();
    assert_eq!(check(dir.path(), spec), State::Ready);
}

#[test]
fn a_weights_file_that_is_no_token_table_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    std::fs::write(&path, b"not a safetensors file at all").unwrap();
    let err = StaticModel::from_files(&test_model().join(TOKENIZER), &path).unwrap_err();
    assert!(err.contains("not a static model"), "{err}");
    let err = StaticModel::from_files(&path, &test_model().join(WEIGHTS)).unwrap_err();
    assert!(err.contains("not a tokenizer"), "{err}");
}
