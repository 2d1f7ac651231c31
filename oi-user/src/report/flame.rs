//! Folded stacks and flame graphs: the one writer every tool uses for pictures (allocation
//! stacks weighted by bytes, call trees by time, footprint trees by bytes).
//!
//! The folded format is Brendan Gregg's: one line per stack, frames root first separated by
//! `;`, a space, then the weight. The SVG is drawn by inferno (the Rust port of
//! flamegraph.pl), so tooltips, search and zoom come with it. Pure: text in, files out.

use std::{
    fmt::Write as _,
    fs::File,
    io::{self, BufWriter, Write as _},
    path::Path,
};

use inferno::flamegraph::{self, Direction, Options};

/// Stacks in folded form, merged as they are added (the same stack twice adds its weights).
#[derive(Debug, Default, Clone)]
pub struct Folded {
    lines: std::collections::BTreeMap<String, u64>,
}

impl Folded {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `weight` to the stack `frames`, given root first. Frames are cleaned of the two
    /// characters the format reserves (`;` separates frames; a newline ends the line). A zero
    /// weight adds nothing: flame graphs cannot draw it.
    pub fn add<S: AsRef<str>>(&mut self, frames: &[S], weight: u64) {
        if weight == 0 || frames.is_empty() {
            return;
        }
        let mut key = String::new();
        for (i, frame) in frames.iter().enumerate() {
            if i > 0 {
                key.push(';');
            }
            key.extend(frame.as_ref().chars().map(|c| match c {
                ';' => ':',
                '\n' | '\r' => ' ',
                c => c,
            }));
        }
        *self.lines.entry(key).or_default() += weight;
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The folded text, one stack per line, in a stable (sorted) order.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (stack, weight) in &self.lines {
            let _ = writeln!(out, "{stack} {weight}");
        }
        out
    }

    pub fn write(&self, path: &Path) -> io::Result<()> {
        self.write_to(File::create(path)?)
    }

    /// The folded text into `out` (a file opened earlier, say).
    pub fn write_to(&self, out: impl io::Write) -> io::Result<()> {
        let mut out = BufWriter::new(out);
        out.write_all(self.text().as_bytes())?;
        out.flush()
    }

    /// Draws the stacks as an SVG flame graph (`Picture::Flame`: roots at the bottom) or an
    /// icicle graph (`Picture::Icicle`: roots at the top, as footprint trees read).
    pub fn write_svg(&self, path: &Path, picture: &Picture<'_>) -> io::Result<()> {
        self.write_svg_to(File::create(path)?, picture)
    }

    /// [`Self::write_svg`] into `out`.
    pub fn write_svg_to(&self, out: impl io::Write, picture: &Picture<'_>) -> io::Result<()> {
        let mut options = Options::default();
        options.title = picture.title.to_string();
        options.subtitle = picture.subtitle.map(str::to_string);
        options.count_name = picture.unit.to_string();
        options.direction = if picture.icicle {
            Direction::Inverted
        } else {
            Direction::Straight
        };
        // The same input draws the same picture (no random colours): diffable, testable.
        options.deterministic = true;
        options.hash = true;
        let text = self.text();
        let file = BufWriter::new(out);
        if text.is_empty() {
            // inferno refuses empty input; an empty picture still says what it is of.
            options.notes = "no samples".into();
            return flamegraph::from_lines(&mut options, ["(none) 1"], file);
        }
        flamegraph::from_lines(&mut options, text.lines(), file)
    }
}

/// What a picture shows.
pub struct Picture<'a> {
    pub title: &'a str,
    pub subtitle: Option<&'a str>,
    /// What the weights count, as the tooltips say it (`bytes`, `ns`, `allocations`).
    pub unit: &'a str,
    /// Roots at the top (icicle) rather than at the bottom (flame).
    pub icicle: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_merges_and_cleans_frames() {
        let mut f = Folded::new();
        f.add(&["main", "shop::handle", "std::map<int;int>::insert"], 48);
        f.add(&["main", "shop::handle", "std::map<int;int>::insert"], 2);
        f.add(&["main", "shop::idle"], 0);
        f.add(&["main"], 7);
        assert_eq!(
            f.text(),
            "main 7\nmain;shop::handle;std::map<int:int>::insert 50\n"
        );
    }

    #[test]
    fn draws_an_svg_with_the_frames_and_their_weights() {
        let mut f = Folded::new();
        f.add(&["main", "a"], 300);
        f.add(&["main", "b"], 100);
        let dir = std::env::temp_dir().join(format!("oi-flame-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        f.write_svg(
            &path,
            &Picture {
                title: "test",
                subtitle: None,
                unit: "bytes",
                icicle: true,
            },
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..100.min(svg.len())]);
        assert!(
            svg.contains("<title>a (300 bytes, 75.00%)</title>"),
            "{svg}"
        );
        assert!(
            svg.contains("<title>b (100 bytes, 25.00%)</title>"),
            "{svg}"
        );
    }
}
