/// Text as PostgreSQL can hold it. A `text` value cannot hold a NUL character (nor can `jsonb`
/// hold `\u0000`), yet SIP lets a quoted-pair carry one (RFC 3261 §25.1) in a display name, a
/// User-Agent comment or a quoted parameter: such text is stored with each NUL written `%00`, the
/// way a SIP URI writes that octet, rather than refused or cut short.
///
/// Threading: a pure function.
enum StorableText {
    static func escapingNUL(_ text: String) -> String {
        guard text.utf8.contains(0) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if scalar == "\0" { out += "%00" } else { out.unicodeScalars.append(scalar) }
        }
        return out
    }
}
