/*eslint-disable block-scoped-var, id-length, no-control-regex, no-magic-numbers, no-mixed-operators, no-prototype-builtins, no-redeclare, no-shadow, no-var, sort-vars, default-case, jsdoc/require-param*/
import $protobuf from "protobufjs/minimal.js";

// Common aliases
const $Reader = $protobuf.Reader, $Writer = $protobuf.Writer, $util = $protobuf.util;
const $Object = $util.global.Object, $undefined = $util.global.undefined, $Error = $util.global.Error, $RangeError = $util.global.RangeError;

// Exported root namespace
const $root = $protobuf.roots["default"] || ($protobuf.roots["default"] = {});

export const istio = $root.istio = (() => {

    /**
     * Namespace istio.
     * @exports istio
     * @namespace
     */
    const istio = {};

    istio.workload = (function() {

        /**
         * Namespace workload.
         * @memberof istio
         * @namespace
         */
        const workload = {};

        workload.zds = (function() {

            /**
             * Namespace zds.
             * @memberof istio.workload
             * @namespace
             */
            const zds = {};

            /**
             * Version enum.
             * @name istio.workload.zds.Version
             * @enum {number}
             * @property {number} NOT_USED=0 NOT_USED value
             * @property {number} V1=1 V1 value
             */
            zds.Version = (function() {
                const valuesById = $Object.create(null), values = $Object.create(valuesById);
                values[valuesById[0] = "NOT_USED"] = 0;
                values[valuesById[1] = "V1"] = 1;
                return values;
            })();

            zds.ZdsHello = (function() {

                /**
                 * Properties of a ZdsHello.
                 * @typedef {Object} istio.workload.zds.ZdsHello.$Properties
                 * @property {istio.workload.zds.Version|null} [version] ZdsHello version
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of a ZdsHello.
                 * @memberof istio.workload.zds
                 * @interface IZdsHello
                 * @augments istio.workload.zds.ZdsHello.$Properties
                 * @deprecated Use istio.workload.zds.ZdsHello.$Properties instead.
                 */

                /**
                 * Shape of a ZdsHello.
                 * @typedef {istio.workload.zds.ZdsHello.$Properties} istio.workload.zds.ZdsHello.$Shape
                 */

                /**
                 * Constructs a new ZdsHello.
                 * @memberof istio.workload.zds
                 * @classdesc Represents a ZdsHello.
                 * @constructor
                 * @param {istio.workload.zds.ZdsHello.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const ZdsHello = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * ZdsHello version.
                 * @member {istio.workload.zds.Version} version
                 * @memberof istio.workload.zds.ZdsHello
                 * @instance
                 */
                ZdsHello.prototype.version = 0;

                /**
                 * Encodes the specified ZdsHello message. Does not implicitly {@link istio.workload.zds.ZdsHello.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.ZdsHello
                 * @static
                 * @param {istio.workload.zds.ZdsHello.$Properties} message ZdsHello message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                ZdsHello.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.version != null && $Object.hasOwnProperty.call(message, "version") && message.version !== 0)
                        writer.uint32(/* id 1, wireType 0 =*/8).int32(message.version);
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes a ZdsHello message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.ZdsHello
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.ZdsHello & istio.workload.zds.ZdsHello.$Shape} ZdsHello
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                ZdsHello.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message, value;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.ZdsHello();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        let wireType = tag & 7;
                        switch (tag >>>= 3) {
                        case 1: {
                                if (wireType !== 0)
                                    break;
                                if (value = reader.int32())
                                    message.version = value;
                                else
                                    delete message.version;
                                continue;
                            }
                        }
                        reader.skipType(wireType, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return ZdsHello;
            })();

            zds.WorkloadInfo = (function() {

                /**
                 * Properties of a WorkloadInfo.
                 * @typedef {Object} istio.workload.zds.WorkloadInfo.$Properties
                 * @property {string|null} [name] WorkloadInfo name
                 * @property {string|null} [namespace] WorkloadInfo namespace
                 * @property {string|null} [serviceAccount] WorkloadInfo serviceAccount
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of a WorkloadInfo.
                 * @memberof istio.workload.zds
                 * @interface IWorkloadInfo
                 * @augments istio.workload.zds.WorkloadInfo.$Properties
                 * @deprecated Use istio.workload.zds.WorkloadInfo.$Properties instead.
                 */

                /**
                 * Shape of a WorkloadInfo.
                 * @typedef {istio.workload.zds.WorkloadInfo.$Properties} istio.workload.zds.WorkloadInfo.$Shape
                 */

                /**
                 * Constructs a new WorkloadInfo.
                 * @memberof istio.workload.zds
                 * @classdesc Represents a WorkloadInfo.
                 * @constructor
                 * @param {istio.workload.zds.WorkloadInfo.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const WorkloadInfo = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * WorkloadInfo name.
                 * @member {string} name
                 * @memberof istio.workload.zds.WorkloadInfo
                 * @instance
                 */
                WorkloadInfo.prototype.name = "";

                /**
                 * WorkloadInfo namespace.
                 * @member {string} namespace
                 * @memberof istio.workload.zds.WorkloadInfo
                 * @instance
                 */
                WorkloadInfo.prototype.namespace = "";

                /**
                 * WorkloadInfo serviceAccount.
                 * @member {string} serviceAccount
                 * @memberof istio.workload.zds.WorkloadInfo
                 * @instance
                 */
                WorkloadInfo.prototype.serviceAccount = "";

                /**
                 * Encodes the specified WorkloadInfo message. Does not implicitly {@link istio.workload.zds.WorkloadInfo.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.WorkloadInfo
                 * @static
                 * @param {istio.workload.zds.WorkloadInfo.$Properties} message WorkloadInfo message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                WorkloadInfo.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.name != null && $Object.hasOwnProperty.call(message, "name") && message.name !== "")
                        writer.uint32(/* id 1, wireType 2 =*/10).string(message.name);
                    if (message.namespace != null && $Object.hasOwnProperty.call(message, "namespace") && message.namespace !== "")
                        writer.uint32(/* id 2, wireType 2 =*/18).string(message.namespace);
                    if (message.serviceAccount != null && $Object.hasOwnProperty.call(message, "serviceAccount") && message.serviceAccount !== "")
                        writer.uint32(/* id 3, wireType 2 =*/26).string(message.serviceAccount);
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes a WorkloadInfo message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.WorkloadInfo
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.WorkloadInfo & istio.workload.zds.WorkloadInfo.$Shape} WorkloadInfo
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                WorkloadInfo.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message, value;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.WorkloadInfo();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        let wireType = tag & 7;
                        switch (tag >>>= 3) {
                        case 1: {
                                if (wireType !== 2)
                                    break;
                                if ((value = reader.stringVerify()).length)
                                    message.name = value;
                                else
                                    delete message.name;
                                continue;
                            }
                        case 2: {
                                if (wireType !== 2)
                                    break;
                                if ((value = reader.stringVerify()).length)
                                    message.namespace = value;
                                else
                                    delete message.namespace;
                                continue;
                            }
                        case 3: {
                                if (wireType !== 2)
                                    break;
                                if ((value = reader.stringVerify()).length)
                                    message.serviceAccount = value;
                                else
                                    delete message.serviceAccount;
                                continue;
                            }
                        }
                        reader.skipType(wireType, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return WorkloadInfo;
            })();

            zds.AddWorkload = (function() {

                /**
                 * Properties of an AddWorkload.
                 * @typedef {Object} istio.workload.zds.AddWorkload.$Properties
                 * @property {string|null} [uid] AddWorkload uid
                 * @property {istio.workload.zds.WorkloadInfo.$Properties|null} [workloadInfo] AddWorkload workloadInfo
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of an AddWorkload.
                 * @memberof istio.workload.zds
                 * @interface IAddWorkload
                 * @augments istio.workload.zds.AddWorkload.$Properties
                 * @deprecated Use istio.workload.zds.AddWorkload.$Properties instead.
                 */

                /**
                 * Shape of an AddWorkload.
                 * @typedef {istio.workload.zds.AddWorkload.$Properties} istio.workload.zds.AddWorkload.$Shape
                 */

                /**
                 * Constructs a new AddWorkload.
                 * @memberof istio.workload.zds
                 * @classdesc Represents an AddWorkload.
                 * @constructor
                 * @param {istio.workload.zds.AddWorkload.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const AddWorkload = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * AddWorkload uid.
                 * @member {string} uid
                 * @memberof istio.workload.zds.AddWorkload
                 * @instance
                 */
                AddWorkload.prototype.uid = "";

                /**
                 * AddWorkload workloadInfo.
                 * @member {istio.workload.zds.WorkloadInfo.$Properties|null|undefined} workloadInfo
                 * @memberof istio.workload.zds.AddWorkload
                 * @instance
                 */
                AddWorkload.prototype.workloadInfo = null;

                /**
                 * Encodes the specified AddWorkload message. Does not implicitly {@link istio.workload.zds.AddWorkload.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.AddWorkload
                 * @static
                 * @param {istio.workload.zds.AddWorkload.$Properties} message AddWorkload message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                AddWorkload.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.uid != null && $Object.hasOwnProperty.call(message, "uid") && message.uid !== "")
                        writer.uint32(/* id 1, wireType 2 =*/10).string(message.uid);
                    if (message.workloadInfo != null && $Object.hasOwnProperty.call(message, "workloadInfo"))
                        $root.istio.workload.zds.WorkloadInfo.encode(message.workloadInfo, writer.uint32(/* id 2, wireType 2 =*/18).fork(), _depth + 1).ldelim();
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes an AddWorkload message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.AddWorkload
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.AddWorkload & istio.workload.zds.AddWorkload.$Shape} AddWorkload
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                AddWorkload.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message, value;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.AddWorkload();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        let wireType = tag & 7;
                        switch (tag >>>= 3) {
                        case 1: {
                                if (wireType !== 2)
                                    break;
                                if ((value = reader.stringVerify()).length)
                                    message.uid = value;
                                else
                                    delete message.uid;
                                continue;
                            }
                        case 2: {
                                if (wireType !== 2)
                                    break;
                                message.workloadInfo = $root.istio.workload.zds.WorkloadInfo.decode(reader, reader.size(), $undefined, _depth + 1, message.workloadInfo);
                                continue;
                            }
                        }
                        reader.skipType(wireType, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return AddWorkload;
            })();

            zds.KeepWorkload = (function() {

                /**
                 * Properties of a KeepWorkload.
                 * @typedef {Object} istio.workload.zds.KeepWorkload.$Properties
                 * @property {string|null} [uid] KeepWorkload uid
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of a KeepWorkload.
                 * @memberof istio.workload.zds
                 * @interface IKeepWorkload
                 * @augments istio.workload.zds.KeepWorkload.$Properties
                 * @deprecated Use istio.workload.zds.KeepWorkload.$Properties instead.
                 */

                /**
                 * Shape of a KeepWorkload.
                 * @typedef {istio.workload.zds.KeepWorkload.$Properties} istio.workload.zds.KeepWorkload.$Shape
                 */

                /**
                 * Constructs a new KeepWorkload.
                 * @memberof istio.workload.zds
                 * @classdesc Represents a KeepWorkload.
                 * @constructor
                 * @param {istio.workload.zds.KeepWorkload.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const KeepWorkload = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * KeepWorkload uid.
                 * @member {string} uid
                 * @memberof istio.workload.zds.KeepWorkload
                 * @instance
                 */
                KeepWorkload.prototype.uid = "";

                /**
                 * Encodes the specified KeepWorkload message. Does not implicitly {@link istio.workload.zds.KeepWorkload.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.KeepWorkload
                 * @static
                 * @param {istio.workload.zds.KeepWorkload.$Properties} message KeepWorkload message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                KeepWorkload.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.uid != null && $Object.hasOwnProperty.call(message, "uid") && message.uid !== "")
                        writer.uint32(/* id 1, wireType 2 =*/10).string(message.uid);
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes a KeepWorkload message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.KeepWorkload
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.KeepWorkload & istio.workload.zds.KeepWorkload.$Shape} KeepWorkload
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                KeepWorkload.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message, value;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.KeepWorkload();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        let wireType = tag & 7;
                        switch (tag >>>= 3) {
                        case 1: {
                                if (wireType !== 2)
                                    break;
                                if ((value = reader.stringVerify()).length)
                                    message.uid = value;
                                else
                                    delete message.uid;
                                continue;
                            }
                        }
                        reader.skipType(wireType, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return KeepWorkload;
            })();

            zds.DelWorkload = (function() {

                /**
                 * Properties of a DelWorkload.
                 * @typedef {Object} istio.workload.zds.DelWorkload.$Properties
                 * @property {string|null} [uid] DelWorkload uid
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of a DelWorkload.
                 * @memberof istio.workload.zds
                 * @interface IDelWorkload
                 * @augments istio.workload.zds.DelWorkload.$Properties
                 * @deprecated Use istio.workload.zds.DelWorkload.$Properties instead.
                 */

                /**
                 * Shape of a DelWorkload.
                 * @typedef {istio.workload.zds.DelWorkload.$Properties} istio.workload.zds.DelWorkload.$Shape
                 */

                /**
                 * Constructs a new DelWorkload.
                 * @memberof istio.workload.zds
                 * @classdesc Represents a DelWorkload.
                 * @constructor
                 * @param {istio.workload.zds.DelWorkload.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const DelWorkload = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * DelWorkload uid.
                 * @member {string} uid
                 * @memberof istio.workload.zds.DelWorkload
                 * @instance
                 */
                DelWorkload.prototype.uid = "";

                /**
                 * Encodes the specified DelWorkload message. Does not implicitly {@link istio.workload.zds.DelWorkload.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.DelWorkload
                 * @static
                 * @param {istio.workload.zds.DelWorkload.$Properties} message DelWorkload message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                DelWorkload.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.uid != null && $Object.hasOwnProperty.call(message, "uid") && message.uid !== "")
                        writer.uint32(/* id 2, wireType 2 =*/18).string(message.uid);
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes a DelWorkload message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.DelWorkload
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.DelWorkload & istio.workload.zds.DelWorkload.$Shape} DelWorkload
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                DelWorkload.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message, value;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.DelWorkload();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        let wireType = tag & 7;
                        switch (tag >>>= 3) {
                        case 2: {
                                if (wireType !== 2)
                                    break;
                                if ((value = reader.stringVerify()).length)
                                    message.uid = value;
                                else
                                    delete message.uid;
                                continue;
                            }
                        }
                        reader.skipType(wireType, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return DelWorkload;
            })();

            zds.SnapshotSent = (function() {

                /**
                 * Properties of a SnapshotSent.
                 * @typedef {Object} istio.workload.zds.SnapshotSent.$Properties
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of a SnapshotSent.
                 * @memberof istio.workload.zds
                 * @interface ISnapshotSent
                 * @augments istio.workload.zds.SnapshotSent.$Properties
                 * @deprecated Use istio.workload.zds.SnapshotSent.$Properties instead.
                 */

                /**
                 * Shape of a SnapshotSent.
                 * @typedef {istio.workload.zds.SnapshotSent.$Properties} istio.workload.zds.SnapshotSent.$Shape
                 */

                /**
                 * Constructs a new SnapshotSent.
                 * @memberof istio.workload.zds
                 * @classdesc Represents a SnapshotSent.
                 * @constructor
                 * @param {istio.workload.zds.SnapshotSent.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const SnapshotSent = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * Encodes the specified SnapshotSent message. Does not implicitly {@link istio.workload.zds.SnapshotSent.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.SnapshotSent
                 * @static
                 * @param {istio.workload.zds.SnapshotSent.$Properties} message SnapshotSent message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                SnapshotSent.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes a SnapshotSent message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.SnapshotSent
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.SnapshotSent & istio.workload.zds.SnapshotSent.$Shape} SnapshotSent
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                SnapshotSent.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.SnapshotSent();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        reader.skipType(tag & 7, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return SnapshotSent;
            })();

            zds.WorkloadRequest = (function() {

                /**
                 * Properties of a WorkloadRequest.
                 * @typedef {Object} istio.workload.zds.WorkloadRequest.$Properties
                 * @property {istio.workload.zds.AddWorkload.$Properties|null} [add] WorkloadRequest add
                 * @property {istio.workload.zds.DelWorkload.$Properties|null} [del] WorkloadRequest del
                 * @property {istio.workload.zds.SnapshotSent.$Properties|null} [snapshotSent] WorkloadRequest snapshotSent
                 * @property {istio.workload.zds.KeepWorkload.$Properties|null} [keep] WorkloadRequest keep
                 * @property {"add"|"del"|"snapshotSent"|"keep"} [payload] WorkloadRequest payload
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of a WorkloadRequest.
                 * @memberof istio.workload.zds
                 * @interface IWorkloadRequest
                 * @augments istio.workload.zds.WorkloadRequest.$Properties
                 * @deprecated Use istio.workload.zds.WorkloadRequest.$Properties instead.
                 */

                /**
                 * Narrowed shape of a WorkloadRequest.
                 * @typedef {{
                 *   add?: istio.workload.zds.AddWorkload.$Shape|null;
                 *   del?: istio.workload.zds.DelWorkload.$Shape|null;
                 *   snapshotSent?: istio.workload.zds.SnapshotSent.$Shape|null;
                 *   keep?: istio.workload.zds.KeepWorkload.$Shape|null;
                 *   $unknowns?: Array.<Uint8Array>;
                 * } & (
                 *   ({ payload?: undefined; add?: null; del?: null; snapshotSent?: null; keep?: null }|{ payload?: "add"; add: istio.workload.zds.AddWorkload.$Shape; del?: null; snapshotSent?: null; keep?: null }|{ payload?: "del"; add?: null; del: istio.workload.zds.DelWorkload.$Shape; snapshotSent?: null; keep?: null }|{ payload?: "snapshotSent"; add?: null; del?: null; snapshotSent: istio.workload.zds.SnapshotSent.$Shape; keep?: null }|{ payload?: "keep"; add?: null; del?: null; snapshotSent?: null; keep: istio.workload.zds.KeepWorkload.$Shape })
                 * )} istio.workload.zds.WorkloadRequest.$Shape
                 */

                /**
                 * Constructs a new WorkloadRequest.
                 * @memberof istio.workload.zds
                 * @classdesc Represents a WorkloadRequest.
                 * @constructor
                 * @param {istio.workload.zds.WorkloadRequest.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const WorkloadRequest = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * WorkloadRequest add.
                 * @member {istio.workload.zds.AddWorkload.$Properties|null|undefined} add
                 * @memberof istio.workload.zds.WorkloadRequest
                 * @instance
                 */
                WorkloadRequest.prototype.add = null;

                /**
                 * WorkloadRequest del.
                 * @member {istio.workload.zds.DelWorkload.$Properties|null|undefined} del
                 * @memberof istio.workload.zds.WorkloadRequest
                 * @instance
                 */
                WorkloadRequest.prototype.del = null;

                /**
                 * WorkloadRequest snapshotSent.
                 * @member {istio.workload.zds.SnapshotSent.$Properties|null|undefined} snapshotSent
                 * @memberof istio.workload.zds.WorkloadRequest
                 * @instance
                 */
                WorkloadRequest.prototype.snapshotSent = null;

                /**
                 * WorkloadRequest keep.
                 * @member {istio.workload.zds.KeepWorkload.$Properties|null|undefined} keep
                 * @memberof istio.workload.zds.WorkloadRequest
                 * @instance
                 */
                WorkloadRequest.prototype.keep = null;

                // OneOf field names bound to virtual getters and setters
                let $oneOfFields;

                /**
                 * WorkloadRequest payload.
                 * @member {"add"|"del"|"snapshotSent"|"keep"|undefined} payload
                 * @memberof istio.workload.zds.WorkloadRequest
                 * @instance
                 */
                $Object.defineProperty(WorkloadRequest.prototype, "payload", {
                    get: $util.oneOfGetter($oneOfFields = ["add", "del", "snapshotSent", "keep"]),
                    set: $util.oneOfSetter($oneOfFields)
                });

                /**
                 * Encodes the specified WorkloadRequest message. Does not implicitly {@link istio.workload.zds.WorkloadRequest.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.WorkloadRequest
                 * @static
                 * @param {istio.workload.zds.WorkloadRequest.$Properties} message WorkloadRequest message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                WorkloadRequest.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.add != null && $Object.hasOwnProperty.call(message, "add"))
                        $root.istio.workload.zds.AddWorkload.encode(message.add, writer.uint32(/* id 1, wireType 2 =*/10).fork(), _depth + 1).ldelim();
                    if (message.del != null && $Object.hasOwnProperty.call(message, "del"))
                        $root.istio.workload.zds.DelWorkload.encode(message.del, writer.uint32(/* id 2, wireType 2 =*/18).fork(), _depth + 1).ldelim();
                    if (message.snapshotSent != null && $Object.hasOwnProperty.call(message, "snapshotSent"))
                        $root.istio.workload.zds.SnapshotSent.encode(message.snapshotSent, writer.uint32(/* id 3, wireType 2 =*/26).fork(), _depth + 1).ldelim();
                    if (message.keep != null && $Object.hasOwnProperty.call(message, "keep"))
                        $root.istio.workload.zds.KeepWorkload.encode(message.keep, writer.uint32(/* id 5, wireType 2 =*/42).fork(), _depth + 1).ldelim();
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes a WorkloadRequest message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.WorkloadRequest
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.WorkloadRequest & istio.workload.zds.WorkloadRequest.$Shape} WorkloadRequest
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                WorkloadRequest.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.WorkloadRequest();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        let wireType = tag & 7;
                        switch (tag >>>= 3) {
                        case 1: {
                                if (wireType !== 2)
                                    break;
                                message.add = $root.istio.workload.zds.AddWorkload.decode(reader, reader.size(), $undefined, _depth + 1, message.add);
                                message.payload = "add";
                                continue;
                            }
                        case 2: {
                                if (wireType !== 2)
                                    break;
                                message.del = $root.istio.workload.zds.DelWorkload.decode(reader, reader.size(), $undefined, _depth + 1, message.del);
                                message.payload = "del";
                                continue;
                            }
                        case 3: {
                                if (wireType !== 2)
                                    break;
                                message.snapshotSent = $root.istio.workload.zds.SnapshotSent.decode(reader, reader.size(), $undefined, _depth + 1, message.snapshotSent);
                                message.payload = "snapshotSent";
                                continue;
                            }
                        case 5: {
                                if (wireType !== 2)
                                    break;
                                message.keep = $root.istio.workload.zds.KeepWorkload.decode(reader, reader.size(), $undefined, _depth + 1, message.keep);
                                message.payload = "keep";
                                continue;
                            }
                        }
                        reader.skipType(wireType, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return WorkloadRequest;
            })();

            zds.Ack = (function() {

                /**
                 * Properties of an Ack.
                 * @typedef {Object} istio.workload.zds.Ack.$Properties
                 * @property {string|null} [error] Ack error
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of an Ack.
                 * @memberof istio.workload.zds
                 * @interface IAck
                 * @augments istio.workload.zds.Ack.$Properties
                 * @deprecated Use istio.workload.zds.Ack.$Properties instead.
                 */

                /**
                 * Shape of an Ack.
                 * @typedef {istio.workload.zds.Ack.$Properties} istio.workload.zds.Ack.$Shape
                 */

                /**
                 * Constructs a new Ack.
                 * @memberof istio.workload.zds
                 * @classdesc Represents an Ack.
                 * @constructor
                 * @param {istio.workload.zds.Ack.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const Ack = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * Ack error.
                 * @member {string} error
                 * @memberof istio.workload.zds.Ack
                 * @instance
                 */
                Ack.prototype.error = "";

                /**
                 * Encodes the specified Ack message. Does not implicitly {@link istio.workload.zds.Ack.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.Ack
                 * @static
                 * @param {istio.workload.zds.Ack.$Properties} message Ack message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                Ack.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.error != null && $Object.hasOwnProperty.call(message, "error") && message.error !== "")
                        writer.uint32(/* id 1, wireType 2 =*/10).string(message.error);
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes an Ack message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.Ack
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.Ack & istio.workload.zds.Ack.$Shape} Ack
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                Ack.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message, value;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.Ack();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        let wireType = tag & 7;
                        switch (tag >>>= 3) {
                        case 1: {
                                if (wireType !== 2)
                                    break;
                                if ((value = reader.stringVerify()).length)
                                    message.error = value;
                                else
                                    delete message.error;
                                continue;
                            }
                        }
                        reader.skipType(wireType, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return Ack;
            })();

            zds.WorkloadResponse = (function() {

                /**
                 * Properties of a WorkloadResponse.
                 * @typedef {Object} istio.workload.zds.WorkloadResponse.$Properties
                 * @property {istio.workload.zds.Ack.$Properties|null} [ack] WorkloadResponse ack
                 * @property {"ack"} [payload] WorkloadResponse payload
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */

                /**
                 * Properties of a WorkloadResponse.
                 * @memberof istio.workload.zds
                 * @interface IWorkloadResponse
                 * @augments istio.workload.zds.WorkloadResponse.$Properties
                 * @deprecated Use istio.workload.zds.WorkloadResponse.$Properties instead.
                 */

                /**
                 * Narrowed shape of a WorkloadResponse.
                 * @typedef {{
                 *   ack?: istio.workload.zds.Ack.$Shape|null;
                 *   $unknowns?: Array.<Uint8Array>;
                 * } & (
                 *   ({ payload?: undefined; ack?: null }|{ payload?: "ack"; ack: istio.workload.zds.Ack.$Shape })
                 * )} istio.workload.zds.WorkloadResponse.$Shape
                 */

                /**
                 * Constructs a new WorkloadResponse.
                 * @memberof istio.workload.zds
                 * @classdesc Represents a WorkloadResponse.
                 * @constructor
                 * @param {istio.workload.zds.WorkloadResponse.$Properties=} [properties] Properties to set
                 * @property {Array.<Uint8Array>} [$unknowns] Unknown fields preserved while decoding when enabled
                 */
                const WorkloadResponse = function (properties) {
                    if (properties)
                        for (let keys = $Object.keys(properties), i = 0; i < keys.length; ++i)
                            if (properties[keys[i]] != null && keys[i] !== "__proto__")
                                this[keys[i]] = properties[keys[i]];
                };

                /**
                 * WorkloadResponse ack.
                 * @member {istio.workload.zds.Ack.$Properties|null|undefined} ack
                 * @memberof istio.workload.zds.WorkloadResponse
                 * @instance
                 */
                WorkloadResponse.prototype.ack = null;

                // OneOf field names bound to virtual getters and setters
                let $oneOfFields;

                /**
                 * WorkloadResponse payload.
                 * @member {"ack"|undefined} payload
                 * @memberof istio.workload.zds.WorkloadResponse
                 * @instance
                 */
                $Object.defineProperty(WorkloadResponse.prototype, "payload", {
                    get: $util.oneOfGetter($oneOfFields = ["ack"]),
                    set: $util.oneOfSetter($oneOfFields)
                });

                /**
                 * Encodes the specified WorkloadResponse message. Does not implicitly {@link istio.workload.zds.WorkloadResponse.verify|verify} messages.
                 * @function encode
                 * @memberof istio.workload.zds.WorkloadResponse
                 * @static
                 * @param {istio.workload.zds.WorkloadResponse.$Properties} message WorkloadResponse message or plain object to encode
                 * @param {$protobuf.Writer} [writer] Writer to encode to
                 * @returns {$protobuf.Writer} Writer
                 */
                WorkloadResponse.encode = function (message, writer, _depth) {
                    if (!writer)
                        writer = $Writer.create();
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $util.recursionLimit)
                        throw $Error("max depth exceeded");
                    if (message.ack != null && $Object.hasOwnProperty.call(message, "ack"))
                        $root.istio.workload.zds.Ack.encode(message.ack, writer.uint32(/* id 1, wireType 2 =*/10).fork(), _depth + 1).ldelim();
                    if (message.$unknowns != null && $Object.hasOwnProperty.call(message, "$unknowns"))
                        for (let i = 0; i < message.$unknowns.length; ++i)
                            writer.raw(message.$unknowns[i]);
                    return writer;
                };

                /**
                 * Decodes a WorkloadResponse message from the specified reader or buffer.
                 * @function decode
                 * @memberof istio.workload.zds.WorkloadResponse
                 * @static
                 * @param {$protobuf.Reader|Uint8Array} reader Reader or buffer to decode from
                 * @param {number} [length] Message length if known beforehand
                 * @returns {istio.workload.zds.WorkloadResponse & istio.workload.zds.WorkloadResponse.$Shape} WorkloadResponse
                 * @throws {Error} If the payload is not a reader or valid buffer
                 * @throws {$protobuf.util.ProtocolError} If required fields are missing
                 */
                WorkloadResponse.decode = function (reader, length, _end, _depth, _target) {
                    if (!(reader instanceof $Reader))
                        reader = $Reader.create(reader);
                    if (_depth === $undefined)
                        _depth = 0;
                    if (_depth > $Reader.recursionLimit)
                        throw $Error("max depth exceeded");
                    let end, message;
                    if (length === $undefined)
                        end = reader.len;
                    else {
                        end = reader.pos + length;
                        if (end > reader.len)
                            throw $RangeError("index out of range");
                        length = reader.len;
                        reader.len = end;
                    }
                    message = _target || new $root.istio.workload.zds.WorkloadResponse();
                    while (reader.pos < end) {
                        let start = reader.pos;
                        let tag = reader.tag();
                        if (tag === _end) {
                            _end = $undefined;
                            break;
                        }
                        let wireType = tag & 7;
                        switch (tag >>>= 3) {
                        case 1: {
                                if (wireType !== 2)
                                    break;
                                message.ack = $root.istio.workload.zds.Ack.decode(reader, reader.size(), $undefined, _depth + 1, message.ack);
                                message.payload = "ack";
                                continue;
                            }
                        }
                        reader.skipType(wireType, _depth, tag);
                        if (!reader.discardUnknown) {
                            $util.makeProp(message, "$unknowns", false);
                            (message.$unknowns || (message.$unknowns = [])).push(reader.raw(start, reader.pos));
                        }
                    }
                    if (length !== $undefined) {
                        if (reader.pos !== end)
                            throw $RangeError("index out of range");
                        reader.len = length;
                    }
                    if (_end !== $undefined)
                        throw $Error("missing end group");
                    return message;
                };

                return WorkloadResponse;
            })();

            return zds;
        })();

        return workload;
    })();

    return istio;
})();

export {
  $root as default
};
