//! Reading the console's pages in tests without a browser.

/// `name=value` of the first cookie `r` sets.
pub fn first_cookie(r: &reqwest::Response) -> String {
    let set = r.headers()["set-cookie"].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// The value of the hidden input `name` on a page.
pub fn hidden(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} on the page"));
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}
