public import Foundation
import Glibc

/// A minimal HTTP/1.1 client over one TCP connection, for tests that need the exact bytes of an
/// answer (status line, headers in order, body) and keep-alive. Blocking, with a receive timeout;
/// not thread-safe (one test thread owns it).
public final class TestHTTPClient {
    /// An answer as received.
    public struct Response {
        public let status: Int
        /// Header lines in order, as `(name, value)`.
        public let headers: [(String, String)]
        public let body: Data
        /// Everything between the status line and the body, as received.
        public let headerText: String

        public func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }

        /// The body parsed as a JSON object.
        public var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:]
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    private let socket: Int32
    private var buffer = Data()

    public init(host: String = "127.0.0.1", port: UInt16, timeout: Double = 15) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Failure(description: "socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &address.sin_addr)
        var time = timeval(tv_sec: Int(timeout), tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(socket)
            throw Failure(description: "cannot connect to \(host):\(port)")
        }
    }

    deinit {
        close(socket)
    }

    /// Basic credentials as a header value.
    public static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// Sends one request (with `Content-Length` for a body) and reads its answer.
    public func send(
        _ method: String, _ path: String, headers: [(String, String)] = [], body: Data? = nil
    ) throws -> Response {
        var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        if let body { text += "Content-Length: \(body.count)\r\n" }
        text += "\r\n"
        try write(Data(text.utf8) + (body ?? Data()))
        return try readResponse()
    }

    /// Writes raw bytes.
    public func write(_ data: Data) throws {
        var offset = 0
        while offset < data.count {
            let sent = data.withUnsafeBytes { bytes in
                Glibc.send(socket, bytes.baseAddress! + offset, data.count - offset, Int32(MSG_NOSIGNAL))
            }
            guard sent > 0 else { throw Failure(description: "send failed") }
            offset += sent
        }
    }

    /// Reads one answer (its body by `Content-Length`).
    public func readResponse() throws -> Response {
        let separator = Data("\r\n\r\n".utf8)
        while buffer.range(of: separator) == nil { try fill() }
        let end = buffer.range(of: separator)!
        let head = String(decoding: buffer[buffer.startIndex..<end.lowerBound], as: UTF8.self)
        buffer = Data(buffer[end.upperBound...])
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { throw Failure(description: "bad status line \(statusLine)") }
        let headers = lines.compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        let length = headers.first { $0.0.lowercased() == "content-length" }.flatMap { Int($0.1) } ?? 0
        while buffer.count < length { try fill() }
        let body = Data(buffer.prefix(length))
        buffer = Data(buffer.dropFirst(length))
        return Response(status: status, headers: headers, body: body, headerText: lines.joined(separator: "\r\n"))
    }

    /// True when the server closed the connection (reads end of stream within `timeout`).
    public func isClosedByServer() -> Bool {
        var byte: UInt8 = 0
        return recv(socket, &byte, 1, 0) == 0
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = recv(socket, &chunk, chunk.count, 0)
        guard count > 0 else { throw Failure(description: count == 0 ? "connection closed" : "receive failed or timed out") }
        buffer.append(contentsOf: chunk[0..<count])
    }
}
