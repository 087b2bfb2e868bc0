import Foundation
import RouseTestSupport
@testable import Storage
import XCTest

/// The storage layer's byte writers: JSON for batch parameters, uuid text, the parameter buffer,
/// checked on bytes and then read back by PostgreSQL itself.
final class JSONTextTests: XCTestCase {
    func testObjectsArraysAndEscapesAreWritten() {
        var json = JSONText()
        json.beginArray()
        json.beginObject()
        json.field("s", "a\"b\\c\u{1}d\ne")
        json.field("n", nil as String?)
        json.field("i", -1207)
        json.field("z", 0)
        json.field("q", 0.5)
        json.field("p", strings: ["x", "y\""])
        json.key("inner")
        json.beginArray()
        json.string("u")
        json.string(nil)
        json.endArray()
        json.field("after", "é")
        json.endObject()
        json.beginObject()
        json.field("big", Int.max)
        json.endObject()
        json.endArray()
        XCTAssertEqual(
            json.text,
            #"[{"s":"a\"b\\c\u0001d\u000ae","n":null,"i":-1207,"z":0,"q":0.5,"p":["x","y\""],"inner":["u",null],"after":"é"},"#
                + #"{"big":9223372036854775807}]"#)
    }

    func testAnAddressAndAUuidAreWrittenWithoutStrings() {
        let id = UUID(uuidString: "0A1B2C3D-4E5F-6071-8293-A4B5C6D7E8F9")!
        var json = JSONText()
        json.beginObject()
        json.field("id", uuid: id)
        json.field("aor", number: "10\"0", domain: "example.com")
        json.endObject()
        XCTAssertEqual(json.text, #"{"id":"0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9","aor":"10\"0@example.com"}"#)
        XCTAssertEqual(UUIDText.string(id), id.uuidString.lowercased())
    }

    func testTimesAreWrittenToTheMicrosecond() {
        var json = JSONText()
        json.beginObject()
        json.field("a", epochSeconds: Date(timeIntervalSince1970: 1_800_000_000.000_001))
        json.field("b", epochSeconds: Date(timeIntervalSince1970: 12.5))
        json.field("c", epochSeconds: Date(timeIntervalSince1970: 0))
        json.endObject()
        XCTAssertEqual(json.text, #"{"a":1800000000.000001,"b":12.500000,"c":0.000000}"#)
    }

    func testUuidTextIsParsedInEitherCaseAndOddTextIsRefused() {
        for _ in 0..<100 {
            let id = UUID()
            XCTAssertEqual(UUIDText.parse(id.uuidString), id)
            XCTAssertEqual(UUIDText.parse(id.uuidString.lowercased()), id)
        }
        for bad in ["", "0a1b2c3d4e5f607182 93a4b5c6d7e8f9xxxx", "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8fg",
            "0a1b2c3d-4e5f-6071-8293a-4b5c6d7e8f9", "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f"] {
            XCTAssertNil(UUIDText.parse(bad), bad)
        }
    }

    func testParametersKeepEachValueAndNull() {
        var parameters = PostgresParameters(["one", nil, "", "three"])
        parameters.begin()
        parameters.write("fo")
        parameters.write(UInt8(ascii: "u"))
        parameters.write("r" as StaticString)
        parameters.end()
        XCTAssertEqual(parameters.count, 5)
        XCTAssertEqual((0..<5).map { parameters.value(at: $0) }, ["one", nil, "", "three", "four"])
        let seen = parameters.withValuePointers { values, count in
            (0..<Int(count)).map { values![$0].map { String(cString: $0) } }
        }
        XCTAssertEqual(seen, ["one", nil, "", "three", "four"])
        XCTAssertEqual(PostgresParameters([nil, nil]).withValuePointers { values, _ in [values![0], values![1]].map { $0 == nil } }, [true, true])
    }

    /// What is written is what PostgreSQL reads: the same text, numbers and times back.
    func testPostgreSQLReadsTheBytesBack() throws {
        let database = try TestDatabase()
        defer { database.drop() }
        let connection = try database.settings().connect()
        var json = JSONText()
        json.beginArray()
        for (index, text) in ["plain", "quote\" back\\slash", "tab\tnew\nline\u{1f}", "日本語 😀"].enumerated() {
            json.beginObject()
            json.field("t", text)
            json.field("i", index * 1_000_003 - 7)
            json.field("at", epochSeconds: Date(timeIntervalSince1970: 1_800_000_000 + Double(index) + 0.123_456))
            json.endObject()
        }
        json.endArray()
        var parameters = PostgresParameters()
        parameters.append(json)
        parameters.append("tail")
        let rows = try connection.query(
            """
            SELECT r.t, r.i::text, to_char(to_timestamp(r.at) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), $2
            FROM jsonb_to_recordset($1::jsonb) AS r(t text, i bigint, at double precision) ORDER BY r.i
            """, parameters)
        XCTAssertEqual(rows.rows.map { $0[0] }, ["plain", "quote\" back\\slash", "tab\tnew\nline\u{1f}", "日本語 😀"])
        XCTAssertEqual(rows.rows.map { $0[1] }, ["-7", "999996", "1999999", "3000002"])
        XCTAssertEqual(rows.rows.map { $0[2] }, [
            "2027-01-15 08:00:00.123456", "2027-01-15 08:00:01.123456", "2027-01-15 08:00:02.123456", "2027-01-15 08:00:03.123456",
        ])
        XCTAssertEqual(rows.rows.map { $0[3] }, Array(repeating: "tail", count: 4))
    }
}
