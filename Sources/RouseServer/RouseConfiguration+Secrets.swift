import Crypto
import Foundation
import Glibc
import Storage

/// Where the secrets keys come from: the file of `secrets_key_file`, or `ROUSE_SECRETS_KEY`
/// (never a flag, which `ps` would show). A file readable or writable by its group or others is
/// refused, as is one that holds no well-formed key. Stateless.
enum SecretsKeySource {
    /// The environment variable that may hold the key text itself.
    static let environmentVariable = "ROUSE_SECRETS_KEY"

    /// The keys, or nil when neither source is given.
    static func load(file: String?, environment: [String: String]) throws(SecretSealError) -> SecretSeal? {
        let fromEnvironment = environment[environmentVariable].flatMap { $0.isEmpty ? nil : $0 }
        switch (file, fromEnvironment) {
        case (nil, nil):
            return nil
        case (.some, .some):
            throw SecretSealError("secrets_key_file and \(environmentVariable): give the key one way, not both")
        case (nil, let text?):
            do {
                return try SecretSeal(keyText: text)
            } catch {
                throw SecretSealError("\(environmentVariable): \(error)")
            }
        case (let path?, nil):
            return try read(path)
        }
    }

    /// The keys in the file at `path`, after checking that only its owner can read it.
    static func read(_ path: String) throws(SecretSealError) -> SecretSeal {
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw SecretSealError("secrets_key_file: cannot read '\(path)': \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else { throw SecretSealError("secrets_key_file: '\(path)' is not a file") }
        let mode = status.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw SecretSealError(
                "secrets_key_file: '\(path)' is open to its group or others (mode \(String(mode, radix: 8))): chmod 600 '\(path)'")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SecretSealError("secrets_key_file: cannot read '\(path)'")
        }
        do {
            return try SecretSeal(keyText: String(decoding: data, as: UTF8.self))
        } catch {
            throw SecretSealError("secrets_key_file: '\(path)': \(error)")
        }
    }

    /// Writes a new random key to a new file at `path`, mode 0600; refuses to replace a file.
    static func create(_ path: String) throws(SecretSealError) -> SecretSealKey {
        let key = SecretSealKey.generate()
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else {
            throw SecretSealError("cannot make key file '\(path)': \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        let text = Array((key.hexText + "\n").utf8)
        guard write(descriptor, text, text.count) == text.count, fsync(descriptor) == 0 else {
            throw SecretSealError("cannot write key file '\(path)': \(String(cString: strerror(errno)))")
        }
        return key
    }
}

extension RouseConfiguration {
    /// The database settings every command and the server use: the URL, the connect timeout and
    /// the secrets keys.
    var databaseSettings: PostgresSettings {
        PostgresSettings(conninfo: databaseURL, connectTimeout: databaseConnectTimeout, secrets: secrets)
    }
}
