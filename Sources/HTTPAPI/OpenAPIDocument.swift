public import Foundation
import HTTPServer

/// The OpenAPI 3 document of every endpoint, served at `GET /api/v1/openapi.json`: the resource
/// `Sources/HTTPAPI/openapi.json`, shipped once (a test checks its paths and methods are exactly
/// the route table's documented routes).
public enum OpenAPIDocument {
    public static let path = "/api/v1/openapi.json"

    /// The document's bytes, as the resource holds them; empty if the file is missing from the
    /// resource folder (`HTTPAPIService` then refuses to start). Without the folder itself
    /// (`Rouse_HTTPAPI.resources` beside the binary), `Bundle.module` stops the process naming
    /// where it looked.
    public static let data: Data = {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "json") else { return Data() }
        return (try? Data(contentsOf: url)) ?? Data()
    }()

    /// `GET /api/v1/openapi.json` (no credentials needed).
    @Sendable static func serve(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: data)
    }
}
