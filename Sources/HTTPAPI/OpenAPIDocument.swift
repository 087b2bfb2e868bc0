import Foundation

/// The OpenAPI 3 document of every endpoint, served at `GET /api/v1/openapi.json`. Its text is
/// `docs/openapi.json` byte for byte (a test checks it); regenerate both together.
public enum OpenAPIDocument {
    public static let path = "/api/v1/openapi.json"

    /// Adds the route serving the document (no credentials needed).
    public static func register(on router: inout HTTPRouter) {
        let response = HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: Data(text.utf8))
        router.add("GET", path) { _, respond in respond(response) }
    }

    /// The document.
    public static let text = #"""
{
  "openapi": "3.0.3",
  "info": {
    "title": "Rouse HTTP API",
    "version": "0.1.0",
    "description": "Token posting for phone apps, health, and the admin JSON API. Errors have one shape: {\"error\":{\"code\",\"message\",\"field\"}}."
  },
  "paths": {
    "/api/v1/push/register": {
      "post": {
        "summary": "Post a device's push token, or a browser's web push subscription, for its extension",
        "security": [
          {
            "extensionBasic": []
          }
        ],
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "type": "object",
                "properties": {
                  "token": {
                    "type": "string",
                    "description": "the push token; with platform web it may be left out (the subscription's endpoint is the token)"
                  },
                  "sipUser": {
                    "type": "string"
                  },
                  "platform": {
                    "type": "string",
                    "enum": [
                      "android",
                      "ios",
                      "ios.dev",
                      "web"
                    ]
                  },
                  "param": {
                    "type": "string"
                  },
                  "deviceId": {
                    "type": "string"
                  },
                  "subscription": {
                    "type": "object",
                    "description": "with platform web: the browser's PushSubscription.toJSON()",
                    "properties": {
                      "endpoint": {
                        "type": "string",
                        "description": "the push service's https URL"
                      },
                      "expirationTime": {
                        "type": "number",
                        "nullable": true
                      },
                      "keys": {
                        "type": "object",
                        "properties": {
                          "p256dh": {
                            "type": "string",
                            "description": "the subscription's P-256 public key, base64url"
                          },
                          "auth": {
                            "type": "string",
                            "description": "the 16-byte authentication secret, base64url"
                          }
                        },
                        "required": [
                          "p256dh",
                          "auth"
                        ]
                      }
                    },
                    "required": [
                      "endpoint",
                      "keys"
                    ]
                  }
                },
                "required": [
                  "sipUser"
                ],
                "description": "token is required except with platform web, which requires subscription instead"
              }
            }
          }
        },
        "responses": {
          "200": {
            "description": "stored",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "status": {
                      "type": "string"
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          },
          "403": {
            "$ref": "#/components/responses/Error"
          },
          "413": {
            "$ref": "#/components/responses/Error"
          },
          "503": {
            "$ref": "#/components/responses/Error"
          },
          "429": {
            "description": "too many failed credentials from this address; see Retry-After",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/Error"
                }
              }
            }
          }
        }
      },
      "delete": {
        "summary": "Remove a posted token (log-out)",
        "security": [
          {
            "extensionBasic": []
          }
        ],
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "type": "object",
                "properties": {
                  "token": {
                    "type": "string"
                  },
                  "platform": {
                    "type": "string",
                    "enum": [
                      "android",
                      "ios",
                      "ios.dev",
                      "web"
                    ]
                  },
                  "sipUser": {
                    "type": "string"
                  }
                },
                "required": [
                  "token"
                ]
              }
            }
          }
        },
        "responses": {
          "200": {
            "description": "removed",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "status": {
                      "type": "string"
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          },
          "403": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "503": {
            "$ref": "#/components/responses/Error"
          },
          "429": {
            "description": "too many failed credentials from this address; see Retry-After",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/Error"
                }
              }
            }
          }
        }
      }
    },
    "/api/v1/push/vapid-public-key": {
      "get": {
        "summary": "Rouse's VAPID public key, which browsers subscribe with (applicationServerKey)",
        "security": [],
        "responses": {
          "200": {
            "description": "the public key: an uncompressed P-256 point, base64url",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "publicKey": {
                      "type": "string"
                    }
                  },
                  "required": [
                    "publicKey"
                  ]
                }
              }
            }
          },
          "503": {
            "$ref": "#/components/responses/Error"
          }
        }
      }
    },
    "/api/v1/calls/{call}": {
      "get": {
        "summary": "A call's state, as the device its call token was pushed to sees it",
        "security": [
          {
            "callBearer": []
          }
        ],
        "parameters": [
          {
            "name": "call",
            "in": "path",
            "required": true,
            "description": "the ring push's uuid, or its call_id percent-encoded",
            "schema": {
              "type": "string"
            }
          }
        ],
        "responses": {
          "200": {
            "description": "ringing, answered, canceled or ended, with the reason",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/CallStatus"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "503": {
            "$ref": "#/components/responses/Error"
          }
        }
      }
    },
    "/api/v1/calls/{call}/decline": {
      "post": {
        "summary": "This device declines the call (from the lock screen); every device declined gives the caller 603 (486 when all busy)",
        "security": [
          {
            "callBearer": []
          }
        ],
        "parameters": [
          {
            "name": "call",
            "in": "path",
            "required": true,
            "description": "the ring push's uuid, or its call_id percent-encoded",
            "schema": {
              "type": "string"
            }
          }
        ],
        "requestBody": {
          "required": false,
          "content": {
            "application/json": {
              "schema": {
                "type": "object",
                "properties": {
                  "reason": {
                    "type": "string",
                    "enum": [
                      "declined",
                      "busy"
                    ]
                  }
                }
              }
            }
          }
        },
        "responses": {
          "200": {
            "description": "declined; the call's state after it",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/CallStatus"
                }
              }
            }
          },
          "202": {
            "description": "the call is held by another instance; the decline was passed on to it",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "uuid": {
                      "type": "string"
                    },
                    "state": {
                      "type": "string"
                    },
                    "reason": {
                      "type": "string"
                    }
                  },
                  "required": [
                    "uuid",
                    "state"
                  ]
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "503": {
            "$ref": "#/components/responses/Error"
          }
        }
      }
    },
    "/health": {
      "get": {
        "summary": "PostgreSQL reachable and push apps configured",
        "security": [],
        "responses": {
          "200": {
            "description": "serving: status ok, or degraded with problems outside the instance (a push provider backed off, writes waiting for PostgreSQL), in words",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "status": {
                      "type": "string"
                    },
                    "database": {
                      "type": "string"
                    },
                    "pushApps": {
                      "type": "integer"
                    },
                    "problems": {
                      "type": "array",
                      "items": {
                        "type": "string"
                      }
                    }
                  }
                }
              }
            }
          },
          "503": {
            "description": "degraded, in words",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "status": {
                      "type": "string"
                    },
                    "problems": {
                      "type": "array",
                      "items": {
                        "type": "string"
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    },
    "/api/v1/openapi.json": {
      "get": {
        "summary": "This document",
        "security": [],
        "responses": {
          "200": {
            "description": "the OpenAPI document",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object"
                }
              }
            }
          }
        }
      }
    },
    "/api/v1/admin/organisations": {
      "get": {
        "summary": "List organisations",
        "responses": {
          "200": {
            "description": "organisations",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "items": {
                      "type": "array",
                      "items": {
                        "type": "object",
                        "properties": {
                          "domain": {
                            "type": "string"
                          },
                          "extensionCount": {
                            "type": "integer"
                          },
                          "createdAt": {
                            "type": "string"
                          }
                        }
                      }
                    },
                    "total": {
                      "type": "integer"
                    }
                  }
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      },
      "post": {
        "summary": "Add an organisation",
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "type": "object",
                "properties": {
                  "domain": {
                    "type": "string"
                  }
                },
                "required": [
                  "domain"
                ]
              }
            }
          }
        },
        "responses": {
          "201": {
            "description": "added",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "domain": {
                      "type": "string"
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "409": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/organisations/{domain}": {
      "delete": {
        "summary": "Remove an organisation without extensions",
        "parameters": [
          {
            "name": "domain",
            "in": "path",
            "required": true,
            "schema": {
              "type": "string"
            },
            "description": "the SIP domain"
          }
        ],
        "responses": {
          "200": {
            "description": "removed",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "status": {
                      "type": "string"
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "409": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/extensions": {
      "get": {
        "summary": "List extensions with paging and search",
        "parameters": [
          {
            "name": "domain",
            "in": "query",
            "schema": {
              "type": "string"
            },
            "description": "only this organisation's"
          },
          {
            "name": "search",
            "in": "query",
            "schema": {
              "type": "string"
            },
            "description": "part of number@domain, any case"
          },
          {
            "name": "limit",
            "in": "query",
            "schema": {
              "type": "integer",
              "minimum": 1,
              "maximum": 500,
              "default": 50
            }
          },
          {
            "name": "offset",
            "in": "query",
            "schema": {
              "type": "integer",
              "minimum": 0,
              "default": 0
            }
          }
        ],
        "responses": {
          "200": {
            "description": "a page",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "items": {
                      "type": "array",
                      "items": {
                        "type": "object",
                        "properties": {
                          "address": {
                            "type": "string"
                          },
                          "liveBindings": {
                            "type": "integer"
                          },
                          "createdAt": {
                            "type": "string"
                          },
                          "updatedAt": {
                            "type": "string"
                          }
                        }
                      }
                    },
                    "total": {
                      "type": "integer"
                    },
                    "limit": {
                      "type": "integer"
                    },
                    "offset": {
                      "type": "integer"
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      },
      "post": {
        "summary": "Add an extension",
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "type": "object",
                "properties": {
                  "address": {
                    "type": "string"
                  },
                  "password": {
                    "type": "string"
                  }
                },
                "required": [
                  "address",
                  "password"
                ]
              }
            }
          }
        },
        "responses": {
          "201": {
            "description": "added",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "address": {
                      "type": "string"
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "409": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/extensions/{address}": {
      "get": {
        "summary": "An extension's devices (bindings and posted tokens), recent pushes and recent calls",
        "parameters": [
          {
            "name": "address",
            "in": "path",
            "required": true,
            "schema": {
              "type": "string"
            },
            "description": "number@domain"
          },
          {
            "name": "tokens",
            "in": "query",
            "required": false,
            "schema": {
              "type": "boolean"
            },
            "description": "true: every push token whole (answered with Cache-Control: no-store, and logged as shown, never the token); otherwise shortened to its first 8 and last 4 characters"
          }
        ],
        "responses": {
          "200": {
            "description": "detail",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "address": {
                      "type": "string"
                    },
                    "bindings": {
                      "type": "array",
                      "items": {
                        "type": "object",
                        "properties": {
                          "id": {
                            "type": "string",
                            "description": "the device's id for POST …/devices/{id}/test: a binding's id, or for a posted token a hash of it (never the token)"
                          },
                          "testable": {
                            "type": "boolean",
                            "description": "whether a call ring-pushes it, and so whether it has a test push (false: no push channel, or only a regular iPhone token)"
                          },
                          "contact": {
                            "type": "string"
                          },
                          "userAgent": {
                            "type": "string",
                            "nullable": true
                          },
                          "flow": {
                            "type": "object",
                            "properties": {
                              "transport": {
                                "type": "string"
                              },
                              "source": {
                                "type": "string"
                              }
                            }
                          },
                          "expiresIn": {
                            "type": "integer"
                          },
                          "pushChannels": {
                            "type": "array",
                            "items": {
                              "type": "object",
                              "properties": {
                                "provider": {
                                  "type": "string"
                                },
                                "token": {
                                  "type": "string",
                                  "description": "shortened (first 8 and last 4 characters), or whole with tokens=true"
                                },
                                "param": {
                                  "type": "string",
                                  "nullable": true
                                },
                                "kind": {
                                  "type": "string"
                                },
                                "dead": {
                                  "type": "boolean"
                                }
                              }
                            }
                          }
                        }
                      }
                    },
                    "postedTokens": {
                      "type": "array",
                      "items": {
                        "type": "object",
                        "properties": {
                          "id": {
                            "type": "string",
                            "description": "the device's id for POST …/devices/{id}/test: a binding's id, or for a posted token a hash of it (never the token)"
                          },
                          "testable": {
                            "type": "boolean",
                            "description": "whether a call ring-pushes it, and so whether it has a test push (false: no push channel, or only a regular iPhone token)"
                          },
                          "platform": {
                            "type": "string"
                          },
                          "token": {
                            "type": "string",
                            "description": "shortened (first 8 and last 4 characters), or whole with tokens=true"
                          },
                          "param": {
                            "type": "string",
                            "nullable": true
                          },
                          "kind": {
                            "type": "string"
                          },
                          "postedAt": {
                            "type": "string"
                          },
                          "dead": {
                            "type": "boolean"
                          },
                          "deviceId": {
                            "type": "string",
                            "nullable": true,
                            "description": "the app's device id, as posted"
                          }
                        }
                      }
                    },
                    "recentPushes": {
                      "type": "array",
                      "items": {
                        "type": "object",
                        "properties": {
                          "time": {
                            "type": "string"
                          },
                          "provider": {
                            "type": "string"
                          },
                          "outcome": {
                            "type": "string"
                          },
                          "status": {
                            "type": "integer",
                            "nullable": true
                          },
                          "reason": {
                            "type": "string",
                            "nullable": true
                          },
                          "explanation": {
                            "type": "string"
                          },
                          "latencyMs": {
                            "type": "integer"
                          },
                          "device": {
                            "type": "string",
                            "nullable": true
                          },
                          "wake": {
                            "type": "object",
                            "nullable": true,
                            "description": "whether the device came back after a call's ring push; null for a push outside a call",
                            "properties": {
                              "result": {
                                "type": "string",
                                "enum": [
                                  "pending",
                                  "woke",
                                  "late",
                                  "no",
                                  "call_ended",
                                  "not_pushed"
                                ]
                              },
                              "afterMs": {
                                "type": "integer",
                                "nullable": true
                              },
                              "words": {
                                "type": "string"
                              }
                            }
                          }
                        }
                      }
                    },
                    "recentCalls": {
                      "type": "array",
                      "description": "the last 20 calls to the extension, newest first",
                      "items": {
                        "$ref": "#/components/schemas/CallSummary"
                      }
                    }
                  }
                }
              }
            },
            "headers": {
              "Cache-Control": {
                "description": "no-store when tokens=true",
                "schema": {
                  "type": "string"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      },
      "delete": {
        "summary": "Remove an extension and its bindings",
        "parameters": [
          {
            "name": "address",
            "in": "path",
            "required": true,
            "schema": {
              "type": "string"
            },
            "description": "number@domain"
          }
        ],
        "responses": {
          "200": {
            "description": "removed",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "status": {
                      "type": "string"
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/extensions/{address}/devices/{id}/test": {
      "post": {
        "summary": "Send one device of the extension a test push exactly as a call rings it (its push app, its provider's host, the ring payload marked test); outcome in words",
        "parameters": [
          {
            "name": "address",
            "in": "path",
            "required": true,
            "schema": {
              "type": "string"
            },
            "description": "number@domain"
          },
          {
            "name": "id",
            "in": "path",
            "required": true,
            "schema": {
              "type": "string"
            },
            "description": "the device's id, as GET /api/v1/admin/extensions/{address} lists it"
          }
        ],
        "responses": {
          "200": {
            "description": "the outcome",
            "content": {
              "application/json": {
                "schema": {
                  "allOf": [
                    {
                      "$ref": "#/components/schemas/TestPushOutcome"
                    },
                    {
                      "type": "object",
                      "properties": {
                        "device": {
                          "type": "string",
                          "description": "the device as a call's journey names it"
                        },
                        "provider": {
                          "type": "string",
                          "description": "the provider host it went to: apns, apns.dev, fcm or webpush"
                        },
                        "token": {
                          "type": "string",
                          "description": "the token pushed, shortened"
                        },
                        "appId": {
                          "type": "integer",
                          "nullable": true,
                          "description": "the push app it went through (null for web push, or when no app matched)"
                        }
                      }
                    }
                  ]
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "409": {
            "$ref": "#/components/responses/Error"
          },
          "429": {
            "$ref": "#/components/responses/TestPushSpaced"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/extensions/{address}/password": {
      "put": {
        "summary": "Change an extension's password",
        "parameters": [
          {
            "name": "address",
            "in": "path",
            "required": true,
            "schema": {
              "type": "string"
            },
            "description": "number@domain"
          }
        ],
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "type": "object",
                "properties": {
                  "password": {
                    "type": "string"
                  }
                },
                "required": [
                  "password"
                ]
              }
            }
          }
        },
        "responses": {
          "200": {
            "description": "changed",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "status": {
                      "type": "string"
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/push-apps": {
      "get": {
        "summary": "List push apps (keys are never returned)",
        "responses": {
          "200": {
            "description": "push apps",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "items": {
                      "type": "array",
                      "items": {
                        "type": "object",
                        "properties": {
                          "id": {
                            "type": "integer"
                          },
                          "kind": {
                            "type": "string"
                          },
                          "param": {
                            "type": "string"
                          },
                          "environment": {
                            "type": "string",
                            "nullable": true
                          },
                          "details": {
                            "type": "string"
                          },
                          "createdAt": {
                            "type": "string"
                          }
                        }
                      }
                    },
                    "total": {
                      "type": "integer"
                    }
                  }
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      },
      "post": {
        "summary": "Add a push app (APNs .p8 key or FCM service account)",
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "oneOf": [
                  {
                    "type": "object",
                    "properties": {
                      "kind": {
                        "type": "string",
                        "enum": [
                          "apns"
                        ]
                      },
                      "teamId": {
                        "type": "string"
                      },
                      "keyId": {
                        "type": "string"
                      },
                      "topic": {
                        "type": "string"
                      },
                      "key": {
                        "type": "string"
                      },
                      "environment": {
                        "type": "string",
                        "enum": [
                          "production",
                          "sandbox"
                        ]
                      },
                      "param": {
                        "type": "string"
                      }
                    },
                    "required": [
                      "kind",
                      "teamId",
                      "keyId",
                      "topic",
                      "key"
                    ]
                  },
                  {
                    "type": "object",
                    "properties": {
                      "kind": {
                        "type": "string",
                        "enum": [
                          "fcm"
                        ]
                      },
                      "serviceAccount": {
                        "type": "object"
                      },
                      "param": {
                        "type": "string"
                      }
                    },
                    "required": [
                      "kind",
                      "serviceAccount"
                    ]
                  }
                ]
              }
            }
          }
        },
        "responses": {
          "201": {
            "description": "added",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "id": {
                      "type": "integer"
                    },
                    "kind": {
                      "type": "string"
                    },
                    "param": {
                      "type": "string"
                    },
                    "notes": {
                      "type": "array",
                      "items": {
                        "type": "string"
                      }
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/push-apps/{id}": {
      "put": {
        "summary": "Change a push app in place (absent fields, the key included, keep their stored value)",
        "parameters": [
          {
            "name": "id",
            "in": "path",
            "required": true,
            "schema": {
              "type": "integer"
            },
            "description": "the app's id"
          }
        ],
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "type": "object",
                "properties": {
                  "kind": {
                    "type": "string",
                    "enum": [
                      "apns",
                      "fcm"
                    ]
                  },
                  "teamId": {
                    "type": "string"
                  },
                  "keyId": {
                    "type": "string"
                  },
                  "topic": {
                    "type": "string"
                  },
                  "key": {
                    "type": "string"
                  },
                  "environment": {
                    "type": "string",
                    "enum": [
                      "production",
                      "sandbox",
                      ""
                    ]
                  },
                  "serviceAccount": {
                    "type": "object"
                  },
                  "param": {
                    "type": "string"
                  }
                }
              }
            }
          }
        },
        "responses": {
          "200": {
            "description": "changed",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "id": {
                      "type": "integer"
                    },
                    "kind": {
                      "type": "string"
                    },
                    "param": {
                      "type": "string"
                    },
                    "notes": {
                      "type": "array",
                      "items": {
                        "type": "string"
                      }
                    }
                  }
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          },
          "503": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      },
      "delete": {
        "summary": "Remove a push app",
        "parameters": [
          {
            "name": "id",
            "in": "path",
            "required": true,
            "schema": {
              "type": "integer"
            },
            "description": "the app's id"
          }
        ],
        "responses": {
          "200": {
            "description": "removed",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "status": {
                      "type": "string"
                    }
                  }
                }
              }
            }
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/push-apps/{id}/test": {
      "post": {
        "summary": "Send a test push, outcome in words",
        "parameters": [
          {
            "name": "id",
            "in": "path",
            "required": true,
            "schema": {
              "type": "integer"
            },
            "description": "the app's id"
          }
        ],
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "type": "object",
                "properties": {
                  "token": {
                    "type": "string"
                  },
                  "provider": {
                    "type": "string",
                    "enum": [
                      "apns",
                      "apns.dev",
                      "fcm"
                    ]
                  }
                },
                "required": [
                  "token"
                ]
              }
            }
          }
        },
        "responses": {
          "200": {
            "description": "the outcome",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/TestPushOutcome"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          },
          "429": {
            "$ref": "#/components/responses/TestPushSpaced"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/calls": {
      "get": {
        "summary": "Calls, newest first, with paging and a filter by extension",
        "parameters": [
          {
            "name": "extension",
            "in": "query",
            "schema": {
              "type": "string"
            },
            "description": "only calls to this extension, number@domain"
          },
          {
            "name": "limit",
            "in": "query",
            "schema": {
              "type": "integer",
              "minimum": 1,
              "maximum": 500,
              "default": 50
            }
          },
          {
            "name": "before",
            "in": "query",
            "schema": {
              "type": "string",
              "format": "date-time"
            },
            "description": "only calls that started before this time: the next of the previous page"
          }
        ],
        "responses": {
          "200": {
            "description": "a page",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object",
                  "properties": {
                    "calls": {
                      "type": "array",
                      "items": {
                        "$ref": "#/components/schemas/CallSummary"
                      }
                    },
                    "next": {
                      "type": "string",
                      "nullable": true,
                      "description": "the before of the next page; null on the last page"
                    }
                  },
                  "required": [
                    "calls",
                    "next"
                  ]
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/api/v1/admin/calls/{id}": {
      "get": {
        "summary": "A call's journey: its pushes and whether each device woke, its branches and their responses, its events",
        "parameters": [
          {
            "name": "id",
            "in": "path",
            "required": true,
            "schema": {
              "type": "string",
              "format": "uuid"
            },
            "description": "the call's id (a UUID)"
          }
        ],
        "responses": {
          "200": {
            "description": "the journey",
            "content": {
              "application/json": {
                "schema": {
                  "allOf": [
                    {
                      "$ref": "#/components/schemas/CallSummary"
                    },
                    {
                      "type": "object",
                      "properties": {
                        "source": {
                          "type": "string"
                        },
                        "instanceId": {
                          "type": "string"
                        },
                        "pushes": {
                          "type": "array",
                          "items": {
                            "type": "object",
                            "properties": {
                              "id": {
                                "type": "string",
                                "format": "uuid"
                              },
                              "device": {
                                "type": "string"
                              },
                              "provider": {
                                "type": "string"
                              },
                              "appId": {
                                "type": "integer",
                                "nullable": true
                              },
                              "token": {
                                "type": "string"
                              },
                              "outcome": {
                                "type": "string",
                                "enum": [
                                  "accepted",
                                  "refused",
                                  "failed"
                                ]
                              },
                              "status": {
                                "type": "integer",
                                "nullable": true
                              },
                              "reason": {
                                "type": "string",
                                "nullable": true
                              },
                              "explanation": {
                                "type": "string"
                              },
                              "latencyMs": {
                                "type": "integer"
                              },
                              "sentAt": {
                                "type": "string",
                                "format": "date-time"
                              },
                              "wake": {
                                "$ref": "#/components/schemas/Wake"
                              },
                              "line": {
                                "type": "string",
                                "description": "the journey line in words"
                              }
                            }
                          }
                        },
                        "branches": {
                          "type": "array",
                          "items": {
                            "type": "object",
                            "properties": {
                              "bindingId": {
                                "type": "string",
                                "format": "uuid"
                              },
                              "target": {
                                "type": "string"
                              },
                              "device": {
                                "type": "string"
                              },
                              "transport": {
                                "type": "string"
                              },
                              "startedAt": {
                                "type": "string",
                                "format": "date-time"
                              },
                              "lateFork": {
                                "type": "boolean"
                              },
                              "responses": {
                                "type": "array",
                                "items": {
                                  "type": "object",
                                  "properties": {
                                    "status": {
                                      "type": "integer"
                                    },
                                    "reason": {
                                      "type": "string"
                                    },
                                    "at": {
                                      "type": "string",
                                      "format": "date-time"
                                    }
                                  }
                                }
                              },
                              "canceledBecause": {
                                "type": "string",
                                "nullable": true
                              },
                              "endedAt": {
                                "type": "string",
                                "nullable": true,
                                "format": "date-time"
                              }
                            }
                          }
                        },
                        "events": {
                          "type": "array",
                          "items": {
                            "type": "object",
                            "properties": {
                              "at": {
                                "type": "string",
                                "format": "date-time"
                              },
                              "text": {
                                "type": "string"
                              }
                            }
                          }
                        }
                      }
                    }
                  ]
                }
              }
            }
          },
          "404": {
            "$ref": "#/components/responses/Error"
          },
          "401": {
            "$ref": "#/components/responses/Error"
          }
        },
        "security": [
          {
            "adminBasic": []
          }
        ]
      }
    },
    "/metrics": {
      "get": {
        "summary": "Prometheus metrics (text format 0.0.4): live bindings, REGISTERs by result, HTTP requests by route and status",
        "responses": {
          "200": {
            "description": "metrics",
            "content": {
              "text/plain": {
                "schema": {
                  "type": "string"
                }
              }
            }
          }
        }
      }
    }
  },
  "components": {
    "securitySchemes": {
      "extensionBasic": {
        "type": "http",
        "scheme": "basic",
        "description": "the extension's SIP credentials, number@domain"
      },
      "adminBasic": {
        "type": "http",
        "scheme": "basic",
        "description": "an administrator made with rouse admin add"
      },
      "callBearer": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "the call_token of a ring push: one call, one extension, one device, until the call can no longer ring plus 60 s"
      }
    },
    "schemas": {
      "CallStatus": {
        "type": "object",
        "properties": {
          "uuid": {
            "type": "string"
          },
          "state": {
            "type": "string",
            "enum": [
              "ringing",
              "answered",
              "canceled",
              "ended"
            ]
          },
          "reason": {
            "type": "string",
            "nullable": true
          },
          "answeredHere": {
            "type": "boolean"
          },
          "missed": {
            "type": "boolean"
          },
          "declinedHere": {
            "type": "boolean"
          }
        },
        "required": [
          "uuid",
          "state",
          "reason",
          "missed",
          "declinedHere"
        ]
      },
      "Error": {
        "type": "object",
        "properties": {
          "error": {
            "type": "object",
            "properties": {
              "code": {
                "type": "string"
              },
              "message": {
                "type": "string"
              },
              "field": {
                "type": "string"
              }
            },
            "required": [
              "code",
              "message"
            ]
          }
        },
        "required": [
          "error"
        ]
      },
      "CallSummary": {
        "type": "object",
        "properties": {
          "id": {
            "type": "string",
            "format": "uuid"
          },
          "callId": {
            "type": "string"
          },
          "uuid": {
            "type": "string"
          },
          "callee": {
            "type": "string"
          },
          "caller": {
            "type": "string"
          },
          "callerName": {
            "type": "string",
            "nullable": true
          },
          "transport": {
            "type": "string"
          },
          "startedAt": {
            "type": "string",
            "format": "date-time"
          },
          "answeredAt": {
            "type": "string",
            "nullable": true,
            "format": "date-time"
          },
          "endedAt": {
            "type": "string",
            "nullable": true,
            "format": "date-time"
          },
          "outcome": {
            "type": "string",
            "enum": [
              "ringing",
              "answered",
              "canceled",
              "unanswered",
              "failed"
            ]
          },
          "finalStatus": {
            "type": "integer",
            "nullable": true
          },
          "reason": {
            "type": "string",
            "nullable": true
          },
          "answeredBy": {
            "type": "string",
            "nullable": true
          },
          "ringMs": {
            "type": "integer",
            "nullable": true
          }
        },
        "required": [
          "id",
          "callId",
          "uuid",
          "callee",
          "caller",
          "callerName",
          "transport",
          "startedAt",
          "answeredAt",
          "endedAt",
          "outcome",
          "finalStatus",
          "reason",
          "answeredBy",
          "ringMs"
        ]
      },
      "Wake": {
        "type": "object",
        "properties": {
          "result": {
            "type": "string",
            "enum": [
              "pending",
              "woke",
              "late",
              "no",
              "call_ended",
              "not_pushed"
            ]
          },
          "afterMs": {
            "type": "integer",
            "nullable": true
          },
          "words": {
            "type": "string"
          }
        },
        "required": [
          "result",
          "afterMs",
          "words"
        ]
      },
      "TestPushOutcome": {
        "type": "object",
        "properties": {
          "outcome": {
            "type": "string",
            "enum": [
              "accepted",
              "refused",
              "failed"
            ]
          },
          "description": {
            "type": "string"
          },
          "latencyMs": {
            "type": "integer"
          }
        },
        "description": "a test push's outcome in words (the provider's answer)"
      }
    },
    "responses": {
      "Error": {
        "description": "an error in the one shape",
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      },
      "TestPushSpaced": {
        "description": "a test push went to this device token less than test_push_interval ago",
        "headers": {
          "Retry-After": {
            "description": "seconds until the next test push may go",
            "schema": {
              "type": "integer"
            }
          }
        },
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      }
    }
  }
}

"""#
}
