//! Keeps the generated parts of docs/simulator.md equal to what the
//! simulator computes: each lies between `<!-- generated:NAME -->` and
//! `<!-- end:NAME -->`; with `UPDATE_EXPECT` set, stale blocks are
//! rewritten instead of failing.

/// Replaces (or, with `UPDATE_EXPECT` set, rewrites) the text between
/// `<!-- generated:NAME -->` and `<!-- end:NAME -->` in the document.
fn check_block(doc: &mut String, name: &str, expected: &str) -> Result<(), String> {
    let (begin, end) = (
        format!("<!-- generated:{name} -->\n"),
        format!("<!-- end:{name} -->"),
    );
    let start = doc
        .find(&begin)
        .map(|i| i + begin.len())
        .ok_or_else(|| format!("marker {begin:?} missing"))?;
    let stop = doc[start..]
        .find(&end)
        .map(|i| i + start)
        .ok_or_else(|| format!("marker {end:?} missing"))?;
    if &doc[start..stop] == expected {
        return Ok(());
    }
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        doc.replace_range(start..stop, expected);
        return Ok(());
    }
    Err(format!(
        "docs/simulator.md block `{name}` is stale; rerun with UPDATE_EXPECT=1 and re-read the \
         prose around it.\n--- in the doc:\n{}\n--- simulated:\n{expected}",
        &doc[start..stop]
    ))
}

/// Checks every `(name, text)` block of docs/simulator.md, writing the
/// document back when `UPDATE_EXPECT` rewrote some; panics on a stale
/// block.
pub fn check_simulator_doc(blocks: &[(&str, String)]) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/simulator.md");
    let mut doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let before = doc.clone();
    let results: Vec<_> = blocks
        .iter()
        .map(|(name, text)| check_block(&mut doc, name, text))
        .collect();
    if doc != before {
        std::fs::write(path, &doc).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    for r in results {
        r.unwrap_or_else(|e| panic!("{e}"));
    }
}
