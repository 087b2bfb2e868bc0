import RouseTestSupport
@testable import Storage
import XCTest

/// The reader of the JSON lists PostgreSQL returns with a binding (its Path, its push channels),
/// checked on bytes: escapes, nesting, and refusals of what it is not.
final class JSONArrayReaderTests: XCTestCase {
    func testFlatArraysOfStringsWithEveryEscape() {
        XCTAssertEqual(JSONArrayReader.strings("[]"), [])
        XCTAssertEqual(JSONArrayReader.strings(" [ \"a\" ,\"b\"\n] "), ["a", "b"])
        XCTAssertEqual(
            JSONArrayReader.strings(#"["q\"b\\s\/ \b\f\n\r\t", "\u00e9\u260E \ud83d\udcde", "Téléphone", null]"#),
            ["q\"b\\s/ \u{8}\u{c}\n\r\t", "é☎ 📞", "Téléphone"])
    }

    func testNestedArraysKeepNullsAndStrings() {
        XCTAssertEqual(
            JSONArrayReader.elements(#"[["apns", "abc", null, "voip"], ["fcm", "t", "p", "standard"]]"#),
            [
                .array([.string("apns"), .string("abc"), .null, .string("voip")]),
                .array([.string("fcm"), .string("t"), .string("p"), .string("standard")]),
            ])
    }

    func testWhatIsNotSuchAnArrayIsRefused() {
        for text in [
            "", "[", "]", "{}", "[1]", "[true]", "[\"a\",]", "[\"a\" \"b\"]", "[\"a\"] x", "[\"unterminated]", "[\"bad \\x\"]",
            "[\"\\u12\"]", "[\"\\ud83d\"]", "[\"\\udcde\"]", "[\"raw \n newline\"]", "[nul]", String(repeating: "[", count: 50),
        ] {
            XCTAssertNil(JSONArrayReader.elements(text), text)
        }
        XCTAssertNil(JSONArrayReader.strings("[[\"nested\"]]"))
    }

    func testWhatPostgreSQLPrintsReadsBack() throws {
        let database = try TestDatabase()
        defer { database.drop() }
        let connection = try database.connect()
        let texts = ["plain", "q\"uote", "back\\slash", "new\nline", "tab\t", "ctl \u{1}", "é ☎ 📞"]
        let rows = try connection.query(
            "SELECT array_to_json($1::text[]), json_agg(json_build_array(t, NULL::text)) FROM unnest($1::text[]) AS t",
            ["{" + texts.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }.joined(separator: ",") + "}"])
        XCTAssertEqual(JSONArrayReader.strings(try XCTUnwrap(rows.rows.first?[0])), texts)
        XCTAssertEqual(
            JSONArrayReader.elements(try XCTUnwrap(rows.rows.first?[1])), texts.map { .array([.string($0), .null]) })
    }
}
