import Foundation
import HTTPServer

extension HTTPResponse {
    /// A JSON answer of a dictionary (keys sorted, slashes as they are), for the admin answers
    /// that `rouse … --json` prints alike.
    static func jsonObject(_ status: Int, _ object: [String: Any], headers: [(String, String)] = []) -> HTTPResponse {
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: body + Data("\n".utf8))
    }
}
