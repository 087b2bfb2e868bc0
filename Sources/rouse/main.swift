import Foundation
import RouseServer

/// The `rouse` command line: `serve`, `migrate`, `check-config`, `version`, and help for each.
let arguments = Array(CommandLine.arguments.dropFirst())
let environment = ProcessInfo.processInfo.environment
exit(CommandLineInterface(environment: environment).run(arguments))
