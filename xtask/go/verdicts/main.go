// Command canary-verdicts reads CanaryDaemonSet objects the way the tools that wait on them do,
// with their own libraries, so that a test can compare their verdicts with what it expects:
//
//	canary-verdicts kstatus FILE...        kstatus (sigs.k8s.io/cli-utils): Flux, kpt, cli-utils
//	canary-verdicts argocd HEALTH.lua FILE...  Argo CD's health check, run by gopher-lua
//
// Each FILE holds one object (YAML or JSON; "-" is stdin). Each line of output is a JSON object:
// {"file": FILE, "status": ..., "message": ...}. Any error (an unreadable object, a Lua error,
// a health check that returns no status) exits 1: a test must never read a silent verdict.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type verdict struct {
	File    string `json:"file"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "canary-verdicts:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: canary-verdicts kstatus FILE... | argocd HEALTH.lua FILE...")
	}
	out := json.NewEncoder(os.Stdout)
	switch args[0] {
	case "kstatus":
		for _, file := range args[1:] {
			object, err := readObject(file)
			if err != nil {
				return err
			}
			result, err := status.Compute(&unstructured.Unstructured{Object: object})
			if err != nil {
				return fmt.Errorf("%s: kstatus: %w", file, err)
			}
			if err := out.Encode(verdict{file, result.Status.String(), result.Message}); err != nil {
				return err
			}
		}
	case "argocd":
		if len(args) < 2 {
			return fmt.Errorf("usage: canary-verdicts argocd HEALTH.lua FILE...")
		}
		script, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		for _, file := range args[2:] {
			object, err := readObject(file)
			if err != nil {
				return err
			}
			health, message, err := argocdHealth(string(script), object)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if err := out.Encode(verdict{file, health, message}); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
	return nil
}

func readObject(file string) (map[string]interface{}, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	// As a client decodes an object (unstructured JSON: integers stay int64), from YAML or JSON.
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	object := &unstructured.Unstructured{}
	if err := object.UnmarshalJSON(asJSON); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return object.Object, nil
}

// argocdHealth runs a health check the way Argo CD's resource customizations do
// (util/lua in argo-cd): the object as the global `obj`, the script's returned table read for
// `status` and `message`. Argo CD opens the safe standard libraries only.
func argocdHealth(script string, object map[string]interface{}) (string, string, error) {
	state := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer state.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		state.Push(state.NewFunction(lib.open))
		state.Push(lua.LString(lib.name))
		state.Call(1, 0)
	}
	state.SetGlobal("obj", toLua(state, object))
	if err := state.DoString(script); err != nil {
		return "", "", fmt.Errorf("lua: %w", err)
	}
	returned, ok := state.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the health check returned %s, not a table", state.Get(-1).Type())
	}
	health, ok := returned.RawGetString("status").(lua.LString)
	if !ok {
		return "", "", fmt.Errorf("the health check's table has no status")
	}
	switch string(health) {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
	default:
		return "", "", fmt.Errorf("the health check returned status %q, which Argo CD does not know", health)
	}
	message := ""
	if m, ok := returned.RawGetString("message").(lua.LString); ok {
		message = string(m)
	}
	return string(health), message, nil
}

// toLua turns a decoded JSON value into Lua values as Argo CD does: objects and arrays become
// tables (arrays 1-indexed), numbers LNumber.
func toLua(state *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case map[string]interface{}:
		table := state.NewTable()
		for key, item := range v {
			table.RawSetString(key, toLua(state, item))
		}
		return table
	case []interface{}:
		table := state.NewTable()
		for _, item := range v {
			table.Append(toLua(state, item))
		}
		return table
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	default:
		return lua.LString(fmt.Sprint(v))
	}
}
