//! No module of a workspace crate imports, directly or through others, a module that imports it
//! back (`docs/architecture.md`, "Crates"). This test reads every crate's sources, builds the
//! graph of which module names an item of which other module, and fails on any strongly connected
//! component of more than one module, naming the edges that close it.
//!
//! The sources are parsed with `syn` rather than scanned line by line: `use` trees nest and span
//! lines (`use super::{a::{B, C}, d}`), paths also appear in types, expressions, patterns and macro
//! arguments, and `crate::` inside a comment, a doc link or a string is no dependency. `syn` sees
//! exactly the paths the compiler sees, offline, on the pinned toolchain.
//!
//! What counts as an edge from module `m` to module `t`:
//!
//! - `m` names an item with a path that starts at `crate`, `super`, `self` or a child module of `m`
//!   (in a `use`, a type, an expression or a macro's tokens), and that item is defined in `t`.
//!   Re-exports are followed to the module that defines the item: `use crate::Config` where the
//!   crate root says `pub use config::Config` is an edge to `config`, not to the root.
//! - Edges to an ancestor (`super::Endpoint` from `endpoint/uas.rs`) do not count: a folder's
//!   `mod.rs` owns and declares its submodules, and they may use it (the `impl Endpoint` blocks
//!   split by concern do). Siblings and cousins must form no cycle.
//! - `#[cfg(test)]` modules are left out: they use what they test and nothing uses them.
//!
//! Not seen: calls of methods defined in another module's `impl` block (`self.end_call(..)` from
//! a sibling's `impl Endpoint`) name no path, so they are no edge here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// Known cycles that another change is removing, by crate and exact module set: none are left
/// (the last, `ontime-rtp`'s and `ontime-inference`'s around their `error` modules, ended when
/// those became leaves). A cycle that gains or loses a module, or any other cycle, fails; so
/// does an entry that no longer matches a cycle (delete it then).
const ALLOWED: &[(&str, &[&str])] = &[];

#[test]
fn no_module_cycles_in_the_workspace() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    let mut seen_allowed = BTreeSet::new();
    for (name, crate_root) in crate_roots(root) {
        let graph = Crate::load(&crate_root, &|p| fs::read_to_string(p).ok())
            .unwrap_or_else(|e| panic!("{}: {e}", crate_root.display()));
        for cycle in graph.cycles() {
            let modules: BTreeSet<&str> = cycle.modules.iter().map(String::as_str).collect();
            let allowed = ALLOWED.iter().position(|(krate, set)| {
                *krate == name && set.iter().copied().collect::<BTreeSet<_>>() == modules
            });
            match allowed {
                Some(i) => {
                    seen_allowed.insert(i);
                }
                None => failures.push(format!("{name} ({}): {cycle}", crate_root.display())),
            }
        }
    }
    for (i, (krate, set)) in ALLOWED.iter().enumerate() {
        if !seen_allowed.contains(&i) {
            failures.push(format!(
                "ALLOWED entry {krate} {set:?} matches no cycle any more: delete it"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "module cycles (see docs/architecture.md):\n{}",
        failures.join("\n")
    );
}

/// Every crate root of the workspace's packages (`members = ["crates/*", "gateway"]` and the
/// root facade): `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, named by folder.
fn crate_roots(root: &Path) -> Vec<(String, PathBuf)> {
    let mut packages = vec![(String::from("ontime"), root.to_path_buf())];
    packages.push((String::from("gateway"), root.join("gateway")));
    let mut crates: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("crates/ entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    for dir in crates {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        packages.push((name, dir));
    }
    let mut roots = Vec::new();
    for (name, dir) in packages {
        let src = dir.join("src");
        let mut files = vec![src.join("lib.rs"), src.join("main.rs")];
        if let Ok(bins) = fs::read_dir(src.join("bin")) {
            files.extend(bins.map(|e| e.expect("bin entry").path()));
        }
        roots.extend(
            files
                .into_iter()
                .filter(|f| f.is_file())
                .map(|f| (name.clone(), f)),
        );
    }
    // The facade, the gateway's library and binary, the eleven crates' libraries and the load
    // harness's binary: a crate or binary added or removed changes this count with it.
    assert_eq!(roots.len(), 15, "crate roots found: {roots:?}");
    roots
}

/// One module: what it defines, what its `use`s bind, and the paths it names.
#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// Items defined here (not modules, not `use`s).
    defs: BTreeSet<String>,
    /// Names bound by `use` (private or `pub`), to the absolute path they stand for.
    uses: HashMap<String, Vec<String>>,
    /// `use path::*` targets, absolute.
    globs: Vec<Vec<String>>,
    /// Every crate-relative path named here, absolute, with its line.
    refs: Vec<(Vec<String>, usize)>,
}

impl Module {
    /// Whether `name` is a child module, an item or a `use` binding here.
    fn has(&self, name: &str) -> bool {
        self.children.contains(name) || self.defs.contains(name) || self.uses.contains_key(name)
    }
}

/// A crate's module tree, keyed by absolute path (`crate::endpoint::uas`).
struct Crate {
    modules: BTreeMap<String, Module>,
}

/// A strongly connected component of siblings and the edges between its members, each with the
/// module edge that makes it.
struct Cycle {
    modules: Vec<String>,
    edges: Vec<String>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{{}}}: {}",
            self.modules.join(", "),
            self.edges.join("; ")
        )
    }
}

impl Crate {
    /// Parses the crate whose root file is `root`, reading files with `read`.
    fn load(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Result<Crate, String> {
        let mut krate = Crate {
            modules: BTreeMap::new(),
        };
        let text = read(root).ok_or_else(|| format!("cannot read {}", root.display()))?;
        let file = syn::parse_file(&text).map_err(|e| format!("{}: {e}", root.display()))?;
        let dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
        krate.add_module(vec!["crate".into()], root, &dir, &file.items, read)?;
        Ok(krate)
    }

    /// Adds module `path` with `items`, read from `file`; its children's files live in `dir`.
    fn add_module(
        &mut self,
        path: Vec<String>,
        file: &Path,
        dir: &Path,
        items: &[syn::Item],
        read: &dyn Fn(&Path) -> Option<String>,
    ) -> Result<(), String> {
        let mut module = Module {
            file: file.to_path_buf(),
            ..Module::default()
        };
        let mut nested = Vec::new();
        // `use` targets as written, with the line of their `use`.
        let mut used = Vec::new();
        for item in items {
            match item {
                syn::Item::Mod(m) if is_cfg_test(&m.attrs) => {}
                syn::Item::Mod(m) => {
                    module.children.insert(m.ident.to_string());
                    nested.push(m);
                }
                syn::Item::Use(u) => {
                    let line = u.use_token.span.start().line;
                    flatten_use(&u.tree, &[], &mut |binding, target, glob| {
                        used.push((binding, target, glob, line));
                    });
                }
                other => {
                    if let Some(name) = item_name(other) {
                        module.defs.insert(name);
                    }
                }
            }
        }
        // Written paths start at `crate`, `super`, `self`, a child module, a name a `use` here
        // binds, or outside the crate (`std::`, `rsip::`, a local type's `Self::`); make the
        // first four absolute and drop the rest.
        let children = module.children.clone();
        let to_abs = |segments: &[String]| -> Option<Vec<String>> {
            match segments[0].as_str() {
                "crate" | "super" | "self" => absolute(&path, segments),
                first if children.contains(first) => {
                    Some(path.iter().chain(segments).cloned().collect())
                }
                _ => None,
            }
        };
        for (binding, target, glob, line) in used {
            let Some(target) = to_abs(&target) else {
                continue;
            };
            module.refs.push((target.clone(), line));
            match (glob, binding) {
                (true, _) => module.globs.push(target),
                (false, Some(binding)) => {
                    module.uses.insert(binding, target);
                }
                (false, None) => {}
            }
        }
        let mut collector = Collector { paths: Vec::new() };
        for item in items {
            collector.visit_item(item);
        }
        for (segments, line) in collector.paths {
            let absolute = to_abs(&segments).or_else(|| {
                let target = module.uses.get(&segments[0])?;
                Some(target.iter().chain(&segments[1..]).cloned().collect())
            });
            if let Some(absolute) = absolute {
                module.refs.push((absolute, line));
            }
        }
        self.modules.insert(path.join("::"), module);

        for m in nested {
            let name = m.ident.to_string();
            let mut child_path = path.clone();
            child_path.push(name.clone());
            match &m.content {
                Some((_, items)) => {
                    self.add_module(child_path, file, &dir.join(&name), items, read)?;
                }
                None => {
                    let candidates = match path_attr(&m.attrs) {
                        // Relative to the declaring file's folder (exact for a `mod` at the
                        // top of a file; no crate here has one inside an inline module).
                        Some(p) => vec![file.parent().unwrap_or(dir).join(p)],
                        None => vec![
                            dir.join(format!("{name}.rs")),
                            dir.join(&name).join("mod.rs"),
                        ],
                    };
                    let (child_file, text) = candidates
                        .iter()
                        .find_map(|c| read(c).map(|t| (c.clone(), t)))
                        .ok_or_else(|| format!("module {name}: none of {candidates:?}"))?;
                    let parsed = syn::parse_file(&text)
                        .map_err(|e| format!("{}: {e}", child_file.display()))?;
                    self.add_module(
                        child_path,
                        &child_file,
                        &dir.join(&name),
                        &parsed.items,
                        read,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The module that defines the item at absolute `path` (following `use`s and globs), or
    /// the deepest module on the path when the item is not found (a variant, a macro's output).
    fn resolve(&self, path: &[String], depth: usize) -> String {
        let mut module = String::from("crate");
        for (i, segment) in path.iter().enumerate().skip(1) {
            let Some(m) = self.modules.get(&module) else {
                return module;
            };
            if m.children.contains(segment) {
                module = format!("{module}::{segment}");
                continue;
            }
            if m.defs.contains(segment) || depth > 16 {
                return module;
            }
            if let Some(target) = m.uses.get(segment) {
                let mut next = target.clone();
                next.extend_from_slice(&path[i + 1..]);
                return self.resolve(&next, depth + 1);
            }
            for glob in &m.globs {
                let target = self.resolve(glob, depth + 1);
                if self.modules.get(&target).is_some_and(|g| g.has(segment)) {
                    let mut next = glob.clone();
                    next.extend_from_slice(&path[i..]);
                    return self.resolve(&next, depth + 1);
                }
            }
            return module;
        }
        module
    }

    /// Each module's edges to the modules that define what it names, with where each is first
    /// written; edges to itself and to its ancestors are left out (the rule in the file's doc).
    fn edges(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (name, module) in &self.modules {
            for (path, line) in &module.refs {
                let target = self.resolve(path, 0);
                if target == *name || name.starts_with(&format!("{target}::")) {
                    continue;
                }
                let at = format!("{}:{line}", module.file.display());
                edges
                    .entry(name.clone())
                    .or_default()
                    .entry(target)
                    .or_insert(at);
            }
        }
        edges
    }

    /// The edges between sibling modules, each module standing for its whole subtree: an edge
    /// from `a::x` to `b::y` is an edge from `a` to `b` (children of their common parent), with
    /// the module edge that makes it (the first one) as its witness.
    fn sibling_edges(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut lifted: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (from, targets) in self.edges() {
            for (to, at) in targets {
                let f: Vec<&str> = from.split("::").collect();
                let t: Vec<&str> = to.split("::").collect();
                let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
                if common == f.len() {
                    // A module using its own submodule: the direction `mod` already points in.
                    continue;
                }
                // `edges` drops edges to ancestors, so both paths go one step deeper than their
                // common part.
                let unit_from = f[..=common].join("::");
                let unit_to = t[..=common].join("::");
                lifted
                    .entry(unit_from)
                    .or_default()
                    .entry(unit_to)
                    .or_insert_with(|| format!("{from} -> {to} at {at}"));
            }
        }
        lifted
    }

    /// Strongly connected components of more than one module among siblings (Tarjan's
    /// algorithm on [`Crate::sibling_edges`]): `call` and `registry` form one when
    /// `call::driver` uses `registry` and `registry` uses `call::core`.
    fn cycles(&self) -> Vec<Cycle> {
        let edges = self.sibling_edges();
        let names: Vec<&String> = self.modules.keys().collect();
        let index_of: HashMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let succ: Vec<Vec<usize>> = names
            .iter()
            .map(|n| {
                edges
                    .get(*n)
                    .map(|t| t.keys().filter_map(|k| index_of.get(k).copied()).collect())
                    .unwrap_or_default()
            })
            .collect();
        let mut tarjan = Tarjan {
            succ: &succ,
            index: vec![None; names.len()],
            low: vec![0; names.len()],
            on_stack: vec![false; names.len()],
            stack: Vec::new(),
            next: 0,
            sccs: Vec::new(),
        };
        for v in 0..names.len() {
            if tarjan.index[v].is_none() {
                tarjan.connect(v);
            }
        }
        let mut cycles: Vec<Cycle> = tarjan
            .sccs
            .into_iter()
            .filter(|scc| scc.len() > 1)
            .map(|scc| {
                let mut modules: Vec<String> = scc.iter().map(|&i| names[i].clone()).collect();
                modules.sort();
                let mut out = Vec::new();
                for m in &modules {
                    for (t, at) in edges.get(m).into_iter().flatten() {
                        if modules.contains(t) {
                            out.push(format!("{m} -> {t} ({at})"));
                        }
                    }
                }
                Cycle {
                    modules,
                    edges: out,
                }
            })
            .collect();
        cycles.sort_by(|a, b| a.modules.cmp(&b.modules));
        cycles
    }
}

struct Tarjan<'a> {
    succ: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    sccs: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn connect(&mut self, v: usize) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &self.succ[v] {
            match self.index[w] {
                None => {
                    self.connect(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            self.sccs.push(scc);
        }
    }
}

/// `segments` (starting with `crate`, `super` or `self`) made absolute from module `from`.
fn absolute(from: &[String], segments: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = from.to_vec();
    let mut rest = segments;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.truncate(1);
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        if base.len() < 2 {
            return None;
        }
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Calls `bind(binding name, target path as written, is_glob)` for each leaf of a `use` tree.
fn flatten_use(
    tree: &syn::UseTree,
    prefix: &[String],
    bind: &mut dyn FnMut(Option<String>, Vec<String>, bool),
) {
    let with = |s: String| prefix.iter().cloned().chain([s]).collect::<Vec<_>>();
    match tree {
        syn::UseTree::Path(p) => flatten_use(&p.tree, &with(p.ident.to_string()), bind),
        syn::UseTree::Name(n) if n.ident == "self" => {
            if let Some(last) = prefix.last() {
                bind(Some(last.clone()), prefix.to_vec(), false);
            }
        }
        syn::UseTree::Name(n) => bind(Some(n.ident.to_string()), with(n.ident.to_string()), false),
        syn::UseTree::Rename(r) => {
            let target = if r.ident == "self" {
                prefix.to_vec()
            } else {
                with(r.ident.to_string())
            };
            let name = r.rename.to_string();
            bind((name != "_").then_some(name), target, false)
        }
        syn::UseTree::Glob(_) => bind(None, prefix.to_vec(), true),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, bind);
            }
        }
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Collects every path of two segments or more (as written) in the items it visits, macro
/// arguments included; `use` trees and nested modules are handled by [`Crate::add_module`].
struct Collector {
    paths: Vec<(Vec<String>, usize)>,
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = path.segments[0].ident.span().start().line;
            self.paths.push((segments, line));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, _: &'ast syn::ItemUse) {}

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        scan_tokens(mac.tokens.clone(), &mut self.paths);
        syn::visit::visit_macro(self, mac);
    }
}

/// Paths in a macro's tokens: an identifier followed by `::` and more, e.g. `crate::a::B` in
/// `matches!(x, crate::a::B)`.
fn scan_tokens(tokens: TokenStream, out: &mut Vec<(Vec<String>, usize)>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(g) => {
                scan_tokens(g.stream(), out);
                i += 1;
            }
            TokenTree::Ident(first) => {
                let preceded_by_colons =
                    i >= 1 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == ':');
                let mut segments = vec![first.to_string()];
                let line = first.span().start().line;
                let mut j = i + 1;
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(next)),
                ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    segments.push(next.to_string());
                    j += 3;
                }
                if segments.len() > 1 && !preceded_by_colons {
                    out.push((segments, line));
                }
                i = j.max(i + 1);
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
        }
    }
}

/// The checker on small made-up trees, so that it is known to fail on a cycle.
mod checker {
    use super::*;

    fn load(files: &[(&str, &str)]) -> Crate {
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        Crate::load(Path::new("src/lib.rs"), &|p| files.get(p).cloned()).unwrap()
    }

    fn cycle_sets(krate: &Crate) -> Vec<Vec<String>> {
        krate.cycles().into_iter().map(|c| c.modules).collect()
    }

    #[test]
    fn a_use_cycle_between_siblings_is_found() {
        let krate = load(&[
            ("src/lib.rs", "mod a; mod b; mod c;"),
            ("src/a.rs", "use crate::b::B; pub struct A;"),
            (
                "src/b.rs",
                "pub struct B; fn f() -> super::a::A { todo!() }",
            ),
            ("src/c.rs", "use crate::a::A;"),
        ]);
        assert_eq!(
            cycle_sets(&krate),
            vec![vec!["crate::a".to_string(), "crate::b".to_string()]]
        );
        let shown = krate.cycles()[0].to_string();
        assert!(
            shown.contains("crate::a -> crate::b (crate::a -> crate::b at src/a.rs:1)"),
            "{shown}"
        );
        assert!(
            shown.contains("crate::b -> crate::a (crate::b -> crate::a at src/b.rs:1)"),
            "{shown}"
        );
    }

    #[test]
    fn a_three_module_cycle_through_nested_groups_and_folders_is_found() {
        let krate = load(&[
            ("src/lib.rs", "pub mod ep;"),
            (
                "src/ep/mod.rs",
                "mod x;\nmod y;\nmod z;\npub struct Endpoint;",
            ),
            ("src/ep/x.rs", "use super::{y::{Y1, Y2}, Endpoint};"),
            (
                "src/ep/y.rs",
                "pub struct Y1; pub struct Y2;\nfn g() { let _ = crate::ep::z::Z; }",
            ),
            (
                "src/ep/z.rs",
                "pub struct Z;\nfn h(v: u8) -> bool { matches!(v, _ if self::super::x::F) }",
            ),
        ]);
        assert_eq!(
            cycle_sets(&krate),
            vec![vec![
                "crate::ep::x".to_string(),
                "crate::ep::y".to_string(),
                "crate::ep::z".to_string()
            ]]
        );
    }

    #[test]
    fn a_folder_counts_as_one_module_towards_its_siblings() {
        let krate = load(&[
            ("src/lib.rs", "mod call; mod registry; mod top;"),
            (
                "src/call/mod.rs",
                "mod core; mod driver;\npub use self::core::Core;",
            ),
            ("src/call/core.rs", "pub struct Core;"),
            (
                "src/call/driver.rs",
                "fn run(r: &crate::registry::Registry) {}",
            ),
            (
                "src/registry.rs",
                "use crate::call::Core;\npub struct Registry;",
            ),
            // Uses both, used by neither: part of no cycle.
            ("src/top.rs", "use crate::{call::Core, registry::Registry};"),
        ]);
        let cycles = krate.cycles();
        assert_eq!(
            cycle_sets(&krate),
            vec![vec![
                "crate::call".to_string(),
                "crate::registry".to_string()
            ]]
        );
        let shown = cycles[0].to_string();
        assert!(
            shown.contains("crate::call::driver -> crate::registry at src/call/driver.rs:1"),
            "{shown}"
        );
        assert!(
            shown.contains("crate::registry -> crate::call::core at src/registry.rs:1"),
            "{shown}"
        );
    }

    #[test]
    fn parents_reexports_comments_and_tests_close_no_cycle() {
        let krate = load(&[
            (
                "src/lib.rs",
                "mod a; mod b;\npub use a::A;\npub use b::*;\n\
                 /// [`crate::b::B`] in a doc link\npub fn root() {}",
            ),
            // Through the root's re-export: an edge to `a`, not to the root.
            (
                "src/b.rs",
                "use crate::A;\npub struct B;\npub fn bf() -> A { A }",
            ),
            (
                "src/a.rs",
                "mod inner { use super::super::root; }\npub struct A;\n\
                 // crate::b::B in a comment\nconst S: &str = \"crate::b::B\";\n\
                 #[cfg(test)]\nmod tests { use crate::b::B; }",
            ),
        ]);
        assert!(krate.cycles().is_empty(), "{:?}", cycle_sets(&krate));
        let edges = krate.edges();
        assert_eq!(edges["crate::b"].keys().collect::<Vec<_>>(), ["crate::a"]);
        // `a::inner` uses the root's own function: an edge to an ancestor, which does not count.
        assert!(!edges.contains_key("crate::a::inner"));
        assert!(!edges.contains_key("crate::a"));
        // The glob re-export resolves to the module that defines the item.
        let via_glob = krate.resolve(&["crate".into(), "bf".into()], 0);
        assert_eq!(via_glob, "crate::b");
    }

    #[test]
    fn path_attributes_and_inline_modules_are_followed() {
        let krate = load(&[
            (
                "src/lib.rs",
                "#[path = \"elsewhere/x.rs\"]\nmod x;\nmod y { pub struct Y; }",
            ),
            (
                "src/elsewhere/x.rs",
                "pub struct X;\npub fn f(_: crate::y::Y) {}",
            ),
        ]);
        assert_eq!(
            krate.edges()["crate::x"].keys().collect::<Vec<_>>(),
            ["crate::y"]
        );
        assert!(krate.cycles().is_empty());
    }

    #[test]
    fn a_cycle_through_a_reexport_is_found() {
        let krate = load(&[
            ("src/lib.rs", "mod a; mod b;\npub use b::B;"),
            ("src/a.rs", "pub struct A;\npub fn f(_: crate::B) {}"),
            ("src/b.rs", "pub struct B;\nuse crate::a::A as Renamed;"),
        ]);
        assert_eq!(
            cycle_sets(&krate),
            vec![vec!["crate::a".to_string(), "crate::b".to_string()]]
        );
    }
}
